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

// TestMemoryKeysFold: past memoryKeyCap key positions, the memory store
// folds them into their tables' unkeyed positions: keyed reads stay at
// least as conservative, and the store stays bounded.
func TestMemoryKeysFold(t *testing.T) {
	m := NewMemory()
	ctx := context.Background()
	for i := range memoryKeyCap + 10 {
		if err := m.Raise(ctx, []string{KeyedTable("t"), KeyName("t", "id", int64(i))}, PositionOf(LSN(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.nkeys.Load(); n > memoryKeyCap {
		t.Fatalf("%d key positions kept, cap %d", n, memoryKeyCap)
	}
	// Every key written still reads at least its position.
	for _, i := range []int{0, 1, memoryKeyCap / 2, memoryKeyCap, memoryKeyCap + 9} {
		got, err := m.WritePosition(ctx, []string{UnkeyedName("t"), KeyName("t", "id", int64(i))})
		if err != nil {
			t.Fatal(err)
		}
		if got.Main() < LSN(i+1) {
			t.Fatalf("key %d reads %v after the fold, want at least %v", i, got, LSN(i+1))
		}
	}
}
