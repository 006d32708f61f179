package lsnstore

import (
	"context"
	"testing"
)

func TestMemoryConformance(t *testing.T) {
	checkConformance(t, func(*testing.T, string) Store { return NewMemory() })
}

func TestMemoryZeroValue(t *testing.T) {
	var m Memory
	raiseOK(t, &m, []string{"a"}, 5)
	checkWrite(t, &m, []string{"a"}, 5)
	publishOK(t, &m, map[string]LSN{"r": 3})
	checkReplay(t, &m, map[string]LSN{"r": 3}, 3)
}

func TestMemoryReplayPositionsIsACopy(t *testing.T) {
	m := NewMemory()
	publishOK(t, m, map[string]LSN{"r": 3})
	got, _ := m.ReplayPositions(context.Background())
	got["r"] = PositionOf(1)
	got["x"] = PositionOf(2)
	checkReplay(t, m, map[string]LSN{"r": 3}, 3)
}

func TestMemoryWritePositionAllocs(t *testing.T) {
	m := NewMemory()
	ctx := context.Background()
	tables := []string{"users", "orders", "items"}
	raiseOK(t, m, tables[:2], 100)
	for _, tb := range [][]string{tables, nil, {"missing"}} {
		if n := testing.AllocsPerRun(100, func() { _, _ = m.WritePosition(ctx, tb) }); n != 0 {
			t.Errorf("WritePosition(%q) allocates %v times", tb, n)
		}
	}
}
