package soak

import (
	"testing"
	"time"
)

// TestCheckerFlagsStaleReads: the checker flags a read older than a write
// that returned before it began, and a session read older than its
// session's write, and nothing else (a read concurrent with a write may
// see either version).
func TestCheckerFlagsStaleReads(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	writes := []Write{
		{Key: 1, Version: 1, Returned: at(10)},
		{Key: 1, Version: 2, Returned: at(20)},
		{Key: 2, Version: 5, Returned: at(15)},
	}
	sessionWrites := []SessionWrite{{Session: 7, Write: Write{Key: 3, Version: 4, Returned: at(30)}}}
	reads := []Read{
		{Key: 1, Version: 0, Started: at(5)},              // before any write: fine
		{Key: 1, Version: 1, Started: at(20)},             // concurrent with version 2's return: fine
		{Key: 1, Version: 1, Started: at(21)},             // STALE: version 2 had returned
		{Key: 1, Version: 2, Started: at(21)},             // fine
		{Key: 2, Version: 4, Started: at(16)},             // STALE
		{Key: 3, Version: 3, Started: at(31), Session: 7}, // STALE for the session (and the table)
		{Key: 3, Version: 4, Started: at(31), Session: 7}, // fine
		{Key: 3, Version: 3, Started: at(29), Session: 7}, // before the session's write: fine
		{Key: 9, Version: 0, Started: at(50), Session: 8}, // nothing written: fine
	}
	got := Check(writes, sessionWrites, reads)
	want := map[time.Time]int64{at(21): 2, at(16): 5, at(31): 4}
	if len(got) != len(want) {
		t.Fatalf("violations %+v, want %d", got, len(want))
	}
	for _, v := range got {
		if want[v.Read.Started] != v.Want || v.Read.Version >= v.Want {
			t.Fatalf("unexpected violation %+v", v)
		}
	}
}

func TestCheckDirect(t *testing.T) {
	t0 := time.Now()
	writes := []Write{{Key: 1, Version: 1, Returned: t0}, {Key: 1, Version: 2, Returned: t0.Add(100 * time.Millisecond)}}
	reads := []Read{
		{Key: 1, Version: 0, Started: t0.Add(50 * time.Millisecond)},  // late, within the bound
		{Key: 1, Version: 1, Started: t0.Add(150 * time.Millisecond)}, // late (misses v2), within
		{Key: 1, Version: 0, Started: t0.Add(2 * time.Second)},        // misses v1 by 2 s: stale
		{Key: 1, Version: 2, Started: t0.Add(3 * time.Second)},        // fresh
		{Key: 1, Version: 0, Started: t0.Add(-time.Second)},           // before every write
		{Key: 2, Version: 0, Started: t0.Add(5 * time.Second)},        // another key
	}
	late, lateBy, stale := checkDirect(writes, reads, time.Second)
	if len(late) != 3 {
		t.Fatalf("late = %d reads, want 3: %+v", len(late), late)
	}
	if lateBy != 2*time.Second {
		t.Fatalf("lateBy = %v, want 2s (the read that missed v1, written 2 s before it)", lateBy)
	}
	// It had to see v2 as well (written 1.9 s before it, beyond the bound).
	if len(stale) != 1 || stale[0].Read.Started != t0.Add(2*time.Second) || stale[0].Want != 2 {
		t.Fatalf("stale = %+v, want the read 2 s after v1, missing v2", stale)
	}
	if got := stale[0].Read.Started.Sub(stale[0].Write.Returned); got != 1900*time.Millisecond {
		t.Fatalf("stale violation names a write %v before the read, want 1.9s", got)
	}
}
