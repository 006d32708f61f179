package reshard

import (
	"context"
	"testing"
	"time"
)

// TestMoveUnderWrites moves two buckets to an empty shard while four
// writers (each its own map client) insert, update and delete orders and
// items everywhere, then cleans up: every acknowledged row is on exactly
// the shard the final map says, with its acknowledged values, none lost,
// duplicated or left behind; a writer that kept the old map past its lease
// is refused by the source's guard (FRB01), refreshes and lands on the
// new owner.
func TestMoveUnderWrites(t *testing.T) { testMoveUnderWrites(t, newEnv) }

// TestMariaDBMoveUnderWrites is TestMoveUnderWrites on MariaDB shards.
func TestMariaDBMoveUnderWrites(t *testing.T) { testMoveUnderWrites(t, newMariaEnv) }

func testMoveUnderWrites(t *testing.T, mk newEnvFunc) {
	ctx := context.Background()
	owners := []string{"s0", "s0", "s0", "s0", "s1", "s1", "s1", "s1"}
	e := mk(t, []string{"s0", "s1", "s2"}, owners)
	l := newLedger()
	e.seed(l, 1, 3000)
	stale := e.newWriter(l, 15, 0, 200*time.Millisecond)
	ws := e.startWriters(l, 4, 0)
	cfg := e.config()
	var copied int64
	cfg.Progress = func(p Progress) {
		if p.Phase == "copying" {
			copied = p.Rows
		}
	}
	m, err := New(cfg, Move{Buckets: []int{2, 3}, From: "s0", To: "s2"})
	if err != nil {
		t.Fatal(err)
	}
	var installed time.Time // the guard is on every shard
	m.hook = func(p string) error {
		if p == "prepare:slot" {
			installed = time.Now()
		}
		return nil
	}
	rep, err := m.Run(ctx)
	if err != nil {
		ws.stop()
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // writes to the moved buckets go to s2 now
	if err := stale.insert(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if stale.guarded.Load() == 0 {
		t.Errorf("the writer with the old map was not refused by s0")
	}
	if err := ws.stop(); err != nil {
		t.Fatal(err)
	}
	if e.maria != nil {
		if n := ws.installRaces(t, installed); n > 0 {
			t.Logf("%d writers met MDEV-26048 while the guard was installed", n)
		}
	}
	ops, guarded := ws.totals()
	t.Logf("copy: %d rows, %.0f rows/s; catch-up: %d rounds, %d changes, lag %d bytes / %v; switch: hold %v (drain %v, apply %v with %d changes, verify %v, publish %v, acks %v), version %d; writers: %d writes, %d refused by the guard and retried",
		rep.Copy.Rows, rep.Copy.RowsPerSecond, rep.CatchUp.Rounds, rep.CatchUp.Changes, rep.CatchUp.LagBytes, rep.CatchUp.Lag,
		rep.Switch.Hold, rep.Switch.Drain, rep.Switch.Apply, rep.Switch.Changes, rep.Switch.Verify, rep.Switch.Publish, rep.Switch.Acks, rep.Switch.Version, ops, guarded)
	if copied != rep.Copy.Rows || copied == 0 {
		t.Errorf("progress reported %d rows, the copy %d", copied, rep.Copy.Rows)
	}
	if got := e.store.owners(); got[2] != "s2" || got[3] != "s2" || got[1] != "s0" {
		t.Fatalf("owners after the switch: %v", got)
	}
	e.check(l, owners)
	if _, err := m.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	e.check(l, nil)
	if f := e.fences("s0"); len(f) != 2 || f[2] != FenceMoved || f[3] != FenceMoved {
		t.Errorf("fences of s0 after the cleanup: %v, want 2 and 3 moved", f)
	}
	if f := e.fences("s2"); len(f) != 0 {
		t.Errorf("fences of s2 after the switch: %v, want none", f)
	}
	if n := e.slots("s0"); n != 0 {
		t.Errorf("%d slots left on s0", n)
	}
	if st, _ := e.store.move(m.Move().ID); st.Phase != "done" {
		t.Errorf("move status %+v, want done", st)
	}
}
