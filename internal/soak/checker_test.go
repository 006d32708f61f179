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
