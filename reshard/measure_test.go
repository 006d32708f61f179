package reshard

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"
)

// TestMeasure prints the figures of docs/measurements/resharding.md ("Moving
// buckets"); it asserts nothing about time. Run it with
//
//	FRESHREAD_RESHARD_MEASURE=1 FRESHREAD_DOCKER=0 go test -count=1 -run TestMeasure -v ./reshard/
//
// FRESHREAD_RESHARD_ORDERS sets the orders of the copy measurement
// (default 100000; each has 1.5 items), FRESHREAD_RESHARD_SWITCHES the
// switches per series (default 20).
func TestMeasure(t *testing.T) { testMeasure(t, newEnv) }

// TestMariaDBMeasure is TestMeasure on MariaDB shards (the same
// variables; -run TestMariaDBMeasure).
func TestMariaDBMeasure(t *testing.T) { testMeasure(t, newMariaEnv) }

func testMeasure(t *testing.T, mk newEnvFunc) {
	if os.Getenv("FRESHREAD_RESHARD_MEASURE") != "1" {
		t.Skip("set FRESHREAD_RESHARD_MEASURE=1")
	}
	orders, switches := 100000, 20
	fmt.Sscan(os.Getenv("FRESHREAD_RESHARD_ORDERS"), &orders)
	fmt.Sscan(os.Getenv("FRESHREAD_RESHARD_SWITCHES"), &switches)
	t.Run("guard", func(t *testing.T) { measureGuard(t, mk) })
	t.Run("copy", func(t *testing.T) { measureCopy(t, mk, orders) })
	t.Run("switch", func(t *testing.T) { measureSwitches(t, mk, switches, false) })
	t.Run("switch-without-verify", func(t *testing.T) { measureSwitches(t, mk, switches, true) })
}

// measureGuard: the guard's cost per row, server side (a loop of 5000
// single-row INSERTs in one transaction, PL/pgSQL or a MariaDB compound
// statement, so the round trips and commits do not hide it): without the
// trigger, with it and no fence on the row's bucket (the fast path: one
// lookup in the fence table), five times each, the median.
func measureGuard(t *testing.T, mk newEnvFunc) {
	ctx := context.Background()
	e := mk(t, []string{"s0", "s1"}, evenOwners("s0", "s1"))
	m, err := New(e.config(), Move{Buckets: []int{3}, From: "s0", To: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Prepare(ctx); err != nil { // the guard on every shard, bucket 3 fenced on s1
		t.Fatal(err)
	}
	if _, err := e.db["s0"].Exec(`INSERT INTO freshread_bucket_fence VALUES (7, 'moved', 'other')`); err != nil {
		t.Fatal(err)
	}
	const n = 5000
	base := 1_000_000
	g := pgGuardToggle(e)
	if e.maria != nil {
		g = mariaGuardToggle(e)
	}
	loop := func() time.Duration {
		start := time.Now()
		if err := g.inserts(ctx, n, base); err != nil {
			t.Fatal(err)
		}
		base += n
		return time.Since(start) / n
	}
	var with, without []time.Duration
	for i := 0; i < 5; i++ {
		with = append(with, loop())
		if err := g.set(ctx, false); err != nil {
			t.Fatal(err)
		}
		without = append(without, loop())
		if err := g.set(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("INSERT of one order, server side: without the guard %v, with it (no fence on the bucket) %v (runs %v / %v)", pct(without, 50), pct(with, 50), without, with)
	if err := m.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
}

// measureCopy: the copy of two buckets of eight alone, then the catch-up
// under four writers, and the writers' rate before and during the move.
func measureCopy(t *testing.T, mk newEnvFunc, orders int) {
	ctx := context.Background()
	owners := []string{"s0", "s0", "s0", "s0", "s1", "s1", "s1", "s1"}
	e := mk(t, []string{"s0", "s1", "s2"}, owners)
	l := newLedger()
	for done := 0; done < orders; done += 20000 {
		e.seed(l, int64(1+done), min(20000, orders-done))
	}
	analyze := []string{`VACUUM ANALYZE orders`, `VACUUM ANALYZE order_items`}
	if e.maria != nil {
		analyze = []string{`ANALYZE TABLE orders, order_items`}
	}
	for _, q := range analyze {
		if _, err := e.db["s0"].Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	cfg := e.config()
	cfg.ChunkRows = 0 // the default, 1000
	cfg = cfg.withDefaults()
	m, err := New(cfg, Move{Buckets: []int{2, 3}, From: "s0", To: "s2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	cr, err := m.Copy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("copy, no other load: %d rows (%v) in %v: %.0f rows/s, chunks of %d", cr.Rows, cr.Tables, cr.Duration.Round(time.Millisecond), cr.RowsPerSecond, cfg.ChunkRows)
	if err := m.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	ws := e.startWriters(l, 4, 0)
	defer ws.stop()
	time.Sleep(time.Second)
	ops0, _ := ws.totals()
	time.Sleep(2 * time.Second)
	ops1, _ := ws.totals()
	before := float64(ops1-ops0) / 2
	var lags []Progress
	cfg.Progress = func(p Progress) {
		if p.Phase == "catching-up" {
			lags = append(lags, p)
		}
	}
	m, err = New(cfg, Move{Buckets: []int{2, 3}, From: "s0", To: "s2"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := m.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	cr, err = m.Copy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ops2, _ := ws.totals()
	during := float64(ops2-ops1) / time.Since(start).Seconds()
	// Follow for 5 s: the catch-up's lag, round after round.
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if err := m.Follow(fctx, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	cancel()
	ops3, _ := ws.totals()
	following := float64(ops3-ops2) / 5
	var lagBytes []int64
	var lagTimes []time.Duration
	for _, p := range lags {
		lagBytes = append(lagBytes, p.LagBytes)
		lagTimes = append(lagTimes, p.Lag)
	}
	t.Logf("under 4 writers: copy %d rows at %.0f rows/s; writers %.0f writes/s before, %.0f during the copy, %.0f while following", cr.Rows, cr.RowsPerSecond, before, during, following)
	t.Logf("catch-up lag over %d rounds (every 50 ms): %s bytes p50 %d, p90 %d, max %d; time p50 %v, p90 %v, max %v",
		len(lags), logName(e), pct(lagBytes, 50), pct(lagBytes, 90), pct(lagBytes, 100), pct(lagTimes, 50), pct(lagTimes, 90), pct(lagTimes, 100))
	sr, err := m.Switch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("switch of %d rows: hold %v (drain %v, apply %v with %d changes, verify %v, acks %v)", cr.Rows, sr.Hold, sr.Drain, sr.Apply, sr.Changes, sr.Verify, sr.Acks)
	if err := ws.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	e.check(l, nil)
}

// measureSwitches moves two buckets back and forth under four writers,
// n switches, and prints the write hold's distribution.
func measureSwitches(t *testing.T, mk newEnvFunc, n int, skipVerify bool) {
	ctx := context.Background()
	owners := []string{"s0", "s0", "s0", "s0", "s1", "s1", "s1", "s1"}
	e := mk(t, []string{"s0", "s1", "s2"}, owners)
	l := newLedger()
	e.seed(l, 1, 10000)
	ws := e.startWriters(l, 4, 0)
	defer ws.stop()
	cfg := e.config()
	cfg.SkipSwitchVerify = skipVerify
	var holds, drains, applies, verifies, acks []time.Duration
	var moved int64
	from, to := "s0", "s2"
	for i := 0; i < n; i++ {
		m, err := New(cfg, Move{ID: fmt.Sprintf("m%d", i), Buckets: []int{2, 3}, From: from, To: to})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := m.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
		s := rep.Switch
		holds, drains, applies, verifies, acks = append(holds, s.Hold), append(drains, s.Drain), append(applies, s.Apply), append(verifies, s.Verify), append(acks, s.Acks)
		moved += rep.Copy.Rows
		from, to = to, from
	}
	ops, guarded := ws.totals()
	if err := ws.stop(); err != nil {
		t.Fatal(err)
	}
	e.check(l, nil)
	what := "with verify"
	if skipVerify {
		what = "without verify"
	}
	t.Logf("%d switches %s (%d rows moved each, on average), hold: p50 %v, p90 %v, p99/max %v; drain p50 %v, apply p50 %v, verify p50 %v, acks p50 %v; writers: %d writes, %d refused and retried",
		n, what, moved/int64(n), pct(holds, 50), pct(holds, 90), pct(holds, 99), pct(drains, 50), pct(applies, 50), pct(verifies, 50), pct(acks, 50), ops, guarded)
}

func pct[T int64 | time.Duration](xs []T, p int) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}
