package soak

import (
	"strings"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/harness/linearize"
)

// TestPorcupineRegisterPerRow: the linearizability check (porcupine's
// algorithm, internal/harness/linearize) accepts reads that see the last
// write returned before them or one concurrent with them, a write of
// unknown outcome seen or not, and a read order that only an in-flight
// write explains (regular, not atomic); it rejects a read older than a
// write that returned before it began, and a read of a version whose
// write was refused (left out of the history: it did not happen).
func TestPorcupineRegisterPerRow(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := func(k int, v int64, call, ret int) Write {
		return Write{Key: k, Version: v, Called: at(call), Returned: at(ret)}
	}
	r := func(k int, v int64, start, took int) Read {
		return Read{Key: k, Version: v, Started: at(start), Took: time.Duration(took) * time.Millisecond}
	}
	writes := []Write{w(1, 1, 0, 10), w(1, 2, 20, 30), w(1, 4, 50, 60), w(2, 1, 0, 100)}
	unknown := []Write{{Key: 1, Version: 3, Called: at(35), Returned: at(40)}} // failed; v4 follows
	good := []Read{
		r(1, 0, 0, 5),   // before any write returned
		r(1, 1, 11, 2),  // after v1
		r(1, 1, 25, 10), // concurrent with v2
		r(1, 2, 25, 10), // concurrent with v2, sees it
		r(1, 3, 45, 2),  // sees the unknown write: it happened
		r(1, 2, 45, 2),  // or not yet
		r(1, 4, 61, 1),
		// Key 2: v1 in flight until 100; one read sees it, a later one
		// does not: regular, not atomic.
		r(2, 1, 10, 5),
		r(2, 0, 20, 5),
	}
	h := buildHistories(writes, nil, unknown, good)
	if res := checkRegular(h, time.Minute); res.Result != linearize.Ok {
		t.Fatalf("regular check of a good history: %v %v", res, res.Violations)
	}
	if ok, illegal, unknownRows := checkAtomic(h, time.Minute); ok != 1 || illegal != 1 || unknownRows != 0 {
		t.Fatalf("atomic check: %d rows ok, %d illegal, %d unknown; want key 1 ok, key 2 illegal", ok, illegal, unknownRows)
	}
	// A primary restart fails dozens of writes in a row, concurrent with
	// reads: unseen, they are left out, and the check stays quick.
	var failed []Write
	for v := int64(10); v < 70; v++ {
		failed = append(failed, Write{Key: 3, Version: v, Called: at(int(v)), Returned: at(int(v))})
	}
	long := []Read{r(3, 0, 5, 100), r(3, 42, 60, 5), r(3, 70, 140, 1)}
	for _, c := range []struct {
		extra Read
		want  linearize.Result
	}{{r(3, 70, 150, 1), linearize.Ok}, {r(3, 69, 150, 1), linearize.Illegal}} {
		quick := time.Now()
		res := checkRegular(buildHistories([]Write{w(3, 70, 100, 130)}, nil, failed, append(long, c.extra)), time.Minute)
		if res.Result != c.want || time.Since(quick) > 10*time.Second {
			t.Fatalf("60 failed writes, then %+v: %v after %v; want %v", c.extra, res, time.Since(quick), c.want)
		}
	}
	for name, bad := range map[string]Read{
		"stale":          r(1, 1, 31, 1), // v2 returned at 30
		"refused":        r(1, 5, 70, 1), // v5 was refused: never written
		"stale, unknown": r(1, 2, 61, 1), // v4 returned at 60
	} {
		res := checkRegular(buildHistories(writes, nil, unknown, append(append([]Read(nil), good[:7]...), bad)), time.Minute)
		if res.Result != linearize.Illegal || len(res.Violations) != 1 {
			t.Fatalf("%s: %v, violations %q; want one", name, res, res.Violations)
		}
		if !strings.Contains(res.Violations[0], "began "+bad.Started.Format("15:04:05.000000")) {
			t.Fatalf("%s: the violation does not name the read: %s", name, res.Violations[0])
		}
	}
}
