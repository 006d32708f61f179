package reshard

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/freshread/freshread/sharding"
)

// TestMigrationPlan migrates an unsharded database (a shard owning every
// bucket, the store holding no map yet) to two shards under writers:
// stage one follows the source (the moves' status says caught up, with a
// small age, for the reads that accept a lag), stage two switches both
// moves at once (one publish, version 1); after the cleanup every
// acknowledged row is on its shard and the old database is empty and
// fenced.
func TestMigrationPlan(t *testing.T) { testMigrationPlan(t, newEnv) }

// TestMariaDBMigrationPlan is TestMigrationPlan on MariaDB shards.
func TestMariaDBMigrationPlan(t *testing.T) { testMigrationPlan(t, newMariaEnv) }

func testMigrationPlan(t *testing.T, mk newEnvFunc) {
	ctx := context.Background()
	initial := slices.Repeat([]string{"legacy"}, nbTest)
	e := newUnmappedEnvOn(mk, t, []string{"legacy", "s1", "s2"}, initial)
	l := newLedger()
	e.seed(l, 1, 2000)
	ws := e.startWriters(l, 3, time.Millisecond)
	defer ws.stop()
	cfg := e.config()
	cfg.InitialMap = &sharding.BucketMap{Owners: initial}
	moves, err := Diff(initial, evenOwners("s1", "s2"))
	if err != nil {
		t.Fatal(err)
	}
	if len(moves) != 2 {
		t.Fatalf("Diff = %+v", moves)
	}
	plan, err := NewPlan(cfg, moves...)
	if err != nil {
		t.Fatal(err)
	}
	// Stage one: follow.
	fctx, stopFollow := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() { followed <- plan.Follow(fctx, 20*time.Millisecond) }()
	deadline := time.Now().Add(time.Minute)
	for {
		_, sts, _, _ := e.store.Load(ctx)
		caught := 0
		for _, st := range sts {
			if st.CaughtUpAge >= 0 && st.CaughtUpAge < 10*time.Second {
				caught++
			}
		}
		if caught == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stage one never caught up: %+v", sts)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	_, sts, _, _ := e.store.Load(ctx)
	for _, st := range sts {
		// Caught up at least once, and recently: the age is measured from
		// the start of the round, so a loaded machine (CI, -race) makes it
		// a round's length; the bound only catches a follower that stopped.
		if st.Phase != sharding.MoveCatchingUp || st.CaughtUpAge < 0 || st.CaughtUpAge > 10*time.Second {
			t.Errorf("while following: %+v", st)
		}
	}
	stopFollow()
	if err := <-followed; err != nil {
		t.Fatal(err)
	}
	// Stage two: every read and write at once.
	e.store.mu.Lock()
	before := e.store.publishes // one announcement per move (the copy's)
	e.store.mu.Unlock()
	if before != 2 {
		t.Errorf("%d publishes before the switch, want 2 (each move announced once)", before)
	}
	rep, err := plan.Switch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("switch of %v: hold %v (drain %v, apply %v with %d changes, verify %v, acks %v)", rep.Moves, rep.Hold, rep.Drain, rep.Apply, rep.Changes, rep.Verify, rep.Acks)
	if rep.Version != int64(before+1) || e.store.publishes != before+1 {
		t.Errorf("published version %d in %d publishes, want version %d in one more publish", rep.Version, e.store.publishes, before+1)
	}
	if got := e.store.owners(); !slices.Equal(got, evenOwners("s1", "s2")) {
		t.Fatalf("owners after the migration: %v", got)
	}
	time.Sleep(150 * time.Millisecond)
	if err := ws.stop(); err != nil {
		t.Fatal(err)
	}
	e.check(l, initial)
	if _, err := plan.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	e.check(l, nil)
	var left int
	e.db["legacy"].QueryRow(`SELECT (SELECT count(*) FROM orders) + (SELECT count(*) FROM order_items)`).Scan(&left)
	if left != 0 {
		t.Errorf("%d rows left on the old database", left)
	}
	if f := e.fences("legacy"); len(f) != nbTest {
		t.Errorf("fences on the old database: %v, want every bucket moved", f)
	}
}

// TestDoubling doubles two shards to four under writers, the way
// `freshread shard double` does: the moves of sharding.PlanDoubling, each
// run to its switch one after another, then every cleanup. Every
// acknowledged row ends on the owner the final map says, and the old
// owners keep only their own buckets, fenced off the moved ones.
func TestDoubling(t *testing.T) { testDoubling(t, newEnv) }

// TestMariaDBDoubling is TestDoubling on MariaDB shards.
func TestMariaDBDoubling(t *testing.T) { testDoubling(t, newMariaEnv) }

func testDoubling(t *testing.T, mk newEnvFunc) {
	ctx := context.Background()
	owners := evenOwners("s0", "s1")
	e := mk(t, []string{"s0", "s1", "s2", "s3"}, owners)
	l := newLedger()
	e.seed(l, 1, 1500)
	ws := e.startWriters(l, 3, time.Millisecond)
	defer ws.stop()
	cfg := e.config()
	bm, _, _, err := e.store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	planned, next, err := sharding.PlanDoubling(bm, []string{"s2", "s3"})
	if err != nil {
		t.Fatal(err)
	}
	var movers []*Mover
	for _, pm := range planned {
		m, err := New(cfg, Move{Buckets: pm.Buckets, From: pm.From, To: pm.To})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := m.Run(ctx)
		if err != nil {
			t.Fatalf("move %s: %v", m.Move().ID, err)
		}
		t.Logf("%s: copied %d rows, caught up %d changes; hold %v (drain %v, apply %v with %d changes, verify %v, acks %v)", m.Move().ID,
			rep.Copy.Rows, rep.CatchUp.Changes, rep.Switch.Hold, rep.Switch.Drain, rep.Switch.Apply, rep.Switch.Changes, rep.Switch.Verify, rep.Switch.Acks)
		movers = append(movers, m)
	}
	if got := e.store.owners(); !slices.Equal(got, next.Owners) {
		t.Fatalf("owners after the doubling: %v, want %v", got, next.Owners)
	}
	time.Sleep(150 * time.Millisecond)
	if err := ws.stop(); err != nil {
		t.Fatal(err)
	}
	e.check(l, owners)
	for _, m := range movers {
		if _, err := m.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
	}
	e.check(l, nil)
	for _, pm := range planned {
		if n := e.count(pm.From, "orders", pm.Buckets) + e.count(pm.From, "order_items", pm.Buckets); n != 0 {
			t.Errorf("%d rows of the moved buckets left on %s", n, pm.From)
		}
		if f := e.fences(pm.From); len(f) != len(pm.Buckets) {
			t.Errorf("fences on %s: %v, want the %d moved buckets", pm.From, f, len(pm.Buckets))
		}
		if f := e.fences(pm.To); len(f) != 0 {
			t.Errorf("fences on %s: %v, want none", pm.To, f)
		}
		if n := e.slots(pm.From); n != 0 {
			t.Errorf("%d slots left on %s", n, pm.From)
		}
	}
}
