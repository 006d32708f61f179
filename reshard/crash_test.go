package reshard

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCrashResume stops the mover at each phase, under writers, and shows
// that a new mover (another process) resumes to a correct end state, or
// rolls back to one: the crash is either a cancelled context (the mover
// cleans up what it can, as on SIGINT) or errCrash from a hook (the
// process dies where it stands: no rollback of the switch).
func TestCrashResume(t *testing.T) { testCrashResume(t, newEnv) }

// TestMariaDBCrashResume is TestCrashResume on MariaDB shards (the
// catch-up's crash is after a batch's commit on the target, before the
// binlog reader went on).
func TestMariaDBCrashResume(t *testing.T) { testCrashResume(t, newMariaEnv) }

func testCrashResume(t *testing.T, mk newEnvFunc) {
	cases := []struct {
		name   string
		point  string
		nth    int  // the point's nth visit
		hard   bool // errCrash instead of a cancelled context
		finish string
	}{
		{"copy/cancel/resume", "copy:chunk", 3, false, "resume"},
		{"catch-up/crash-before-slot-advance/resume", "apply:committed", 1, true, "resume"},
		{"catch-up/crash/rollback", "apply:committed", 1, true, "rollback"},
		{"switch-fenced/cancel/resume", "switch:fenced", 1, false, "resume"},
		{"switch-before-publish/crash/resume", "switch:before-publish", 1, true, "resume"},
		{"switch-before-publish/crash/rollback", "switch:before-publish", 1, true, "rollback"},
		{"switch-published/crash/resume", "switch:published", 1, true, "resume"},
		{"publish-unknown-but-committed", "", 0, false, "publish-committed"},
		{"publish-failed", "", 0, false, "publish-failed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			owners := []string{"s0", "s0", "s0", "s0", "s1", "s1", "s1", "s1"}
			e := mk(t, []string{"s0", "s1", "s2"}, owners)
			l := newLedger()
			e.seed(l, 1, 2000)
			ws := e.startWriters(l, 3, time.Millisecond)
			defer ws.stop()
			mv := Move{Buckets: []int{2, 3}, From: "s0", To: "s2"}
			cfg := e.config()
			m1, err := New(cfg, mv)
			if err != nil {
				t.Fatal(err)
			}
			ctx1, cancel1 := context.WithCancel(ctx)
			defer cancel1()
			visits := 0
			m1.hook = func(p string) error {
				if p != c.point {
					return nil
				}
				visits++
				if visits != c.nth {
					return nil
				}
				if c.hard {
					return errCrash
				}
				cancel1()
				return nil
			}
			if c.finish == "publish-committed" || c.finish == "publish-failed" {
				// The error is for the switch's publish: get past the
				// copy's announcement (a publish of the same map) first.
				if err := m1.Prepare(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := m1.Copy(ctx); err != nil {
					t.Fatal(err)
				}
			}
			switch c.finish {
			case "publish-committed":
				e.store.mu.Lock()
				e.store.publishErr, e.store.publishCommits = errors.New("connection reset"), true
				e.store.mu.Unlock()
				if _, err := m1.Run(ctx1); err != nil {
					t.Fatalf("a publish whose reply was lost: %v", err)
				}
				finish(t, e, ws, l, owners, m1)
				return
			case "publish-failed":
				e.store.mu.Lock()
				e.store.publishErr = errors.New("store down")
				e.store.mu.Unlock()
			}
			rep1, err := m1.Run(ctx1)
			if err == nil {
				t.Fatalf("the first run did not stop at %s", c.point)
			}
			t.Logf("first run stopped: %v", err)
			published := c.point == "switch:published"
			if got := e.store.owners(); (got[2] == "s2") != published {
				t.Fatalf("owners after the stop: %v", got)
			}
			if c.point == "switch:before-publish" && c.hard {
				if f := e.fences("s0"); f[2] != FenceMoved {
					t.Fatalf("a crash in the switch should leave the source fenced: %v", f)
				}
			}
			time.Sleep(100 * time.Millisecond) // writers go on meanwhile
			m2, err := New(cfg, mv)            // another process
			if err != nil {
				t.Fatal(err)
			}
			if c.finish == "rollback" {
				if err := m2.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
				time.Sleep(100 * time.Millisecond)
				if err := ws.stop(); err != nil {
					t.Fatal(err)
				}
				e.check(l, nil)
				if n := e.count("s2", "orders", mv.Buckets) + e.count("s2", "order_items", mv.Buckets); n != 0 {
					t.Fatalf("%d rows left on the target", n)
				}
				if f0, f2 := e.fences("s0"), e.fences("s2"); len(f0)+len(f2) != 0 {
					t.Fatalf("fences left: s0 %v, s2 %v", f0, f2)
				}
				if n := e.slots("s0"); n != 0 {
					t.Fatalf("%d slots left", n)
				}
				return
			}
			rep2, err := m2.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if c.point == "copy:chunk" {
				var total int64
				for _, n := range rep2.Copy.Tables {
					total += n
				}
				if first := total - rep2.Copy.Rows; first != rep1.Copy.Rows || first != 300 {
					t.Errorf("the resumed copy re-copied: %d rows before the stop (the first run said %d), want the 3 committed chunks of 100", first, rep1.Copy.Rows)
				}
			}
			if published != rep2.Switch.Resumed {
				t.Errorf("the second switch resumed a publish: %v, want %v", rep2.Switch.Resumed, published)
			}
			finish(t, e, ws, l, owners, m2)
		})
	}
}

// finish lets the writers go on on the new map, stops them, checks, cleans
// up and checks again.
func finish(t *testing.T, e *env, ws *writers, l *ledger, owners []string, m *Mover) {
	t.Helper()
	time.Sleep(150 * time.Millisecond)
	if err := ws.stop(); err != nil {
		t.Fatal(err)
	}
	if got := e.store.owners(); got[2] != "s2" || got[3] != "s2" {
		t.Fatalf("owners after the move: %v", got)
	}
	e.check(l, owners)
	if _, err := m.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.check(l, nil)
	if f := e.fences("s2"); len(f) != 0 {
		t.Fatalf("fences left on the target: %v", f)
	}
	if n := e.slots("s0"); n != 0 {
		t.Fatalf("%d slots left", n)
	}
}
