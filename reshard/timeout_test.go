package reshard

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSwitchTimeout: a transaction left open on the source keeps the
// switch from draining: after SwitchTimeout it fails with
// ErrSwitchTimeout and rolls back (the source takes writes, the map is
// unchanged). A client that keeps routing with the old map after the
// publish makes it fail after the publish: the buckets stay fenced on
// both sides, and the next Switch, once the client has moved on,
// finishes (Resumed).
func TestSwitchTimeout(t *testing.T) { testSwitchTimeout(t, newEnv) }

// TestMariaDBSwitchTimeout is TestSwitchTimeout on MariaDB shards.
func TestMariaDBSwitchTimeout(t *testing.T) { testSwitchTimeout(t, newMariaEnv) }

func testSwitchTimeout(t *testing.T, mk newEnvFunc) {
	ctx := context.Background()
	owners := []string{"s0", "s0", "s0", "s0", "s1", "s1", "s1", "s1"}
	e := mk(t, []string{"s0", "s1"}, owners)
	e.seed(newLedger(), 1, 400)
	cfg := e.config()
	cfg.SwitchTimeout = 300 * time.Millisecond
	m := e.copiedMove(cfg, Move{Buckets: []int{1}, From: "s0", To: "s1"})
	v0, _, _, _ := e.store.Load(ctx) // the copy announced the move: version v0.Version

	// A transaction open on the source since before the fence (it read a
	// table: on MariaDB a transaction that has not is not open in InnoDB
	// yet, and would see the fence).
	open, err := e.db["s0"].Begin()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := open.QueryRow(`SELECT count(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Switch(ctx); !errors.Is(err, ErrSwitchTimeout) {
		t.Fatalf("Switch with a transaction open on the source: %v, want ErrSwitchTimeout", err)
	}
	open.Rollback()
	if f := e.fences("s0"); len(f) != 0 {
		t.Fatalf("fences on the source after the timeout: %v", f)
	}
	if got := e.store.owners(); got[1] != "s0" {
		t.Fatalf("published despite the timeout: %v", got)
	}
	if err := e.exec("s0", `UPDATE orders SET status = 'ok' WHERE user_id = 9`); err != nil {
		t.Fatal(err)
	}

	// A client that keeps acknowledging the old map.
	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			e.store.Ack(ctx, "stubborn", v0.Version, time.Second)
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	_, err = m.Switch(ctx)
	if !errors.Is(err, ErrSwitchTimeout) {
		t.Fatalf("Switch with a client on the old map: %v, want ErrSwitchTimeout", err)
	}
	if got := e.store.owners(); got[1] != "s1" {
		t.Fatalf("the map was not published: %v", got)
	}
	if f0, f1 := e.fences("s0"), e.fences("s1"); f0[1] != FenceMoved || f1[1] != FenceIncoming {
		t.Fatalf("after a timeout past the publish: fences s0 %v, s1 %v; want both kept", f0, f1)
	}
	wantGuard(t, e.exec("s1", `INSERT INTO orders (id, user_id) VALUES (900001, 9)`), "orders", "1", "incoming")
	if err := m.Rollback(ctx); !errors.Is(err, ErrPhase) {
		t.Fatalf("Rollback after the publish: %v, want ErrPhase", err)
	}
	close(stop)
	<-stopped
	e.store.Ack(ctx, "stubborn", v0.Version+1, time.Second) // it moved on
	rep, err := m.Switch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Resumed || rep.Version != v0.Version+1 {
		t.Fatalf("the second switch: %+v", rep)
	}
	if err := e.exec("s1", `INSERT INTO orders (id, user_id) VALUES (900001, 9)`); err != nil {
		t.Fatal(err)
	}
}

// TestCopyWaitsForEveryProcess: the copy announces the move (publishes the
// map again) and copies nothing until every process has loaded it, so that
// no process reads the target's partial copy without knowing the move is
// pending. A process that keeps routing with the older version holds the
// copy back until SwitchTimeout; once it follows, the copy runs.
func TestCopyWaitsForEveryProcess(t *testing.T) {
	ctx := context.Background()
	owners := []string{"s0", "s0", "s0", "s0", "s1", "s1", "s1", "s1"}
	e := newEnv(t, []string{"s0", "s1"}, owners)
	e.seed(newLedger(), 1, 200)
	cfg := e.config()
	cfg.SwitchTimeout = 300 * time.Millisecond
	m, err := New(cfg, Move{Buckets: []int{1}, From: "s0", To: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	v0, _, _, _ := e.store.Load(ctx)
	e.store.Ack(ctx, "behind", v0.Version, time.Minute)
	if _, err := m.Copy(ctx); !errors.Is(err, ErrSwitchTimeout) {
		t.Fatalf("Copy with a process behind: %v, want ErrSwitchTimeout", err)
	}
	if n := e.count("s1", "orders", []int{1}); n != 0 {
		t.Fatalf("%d rows copied before every process knew of the move", n)
	}
	v1, _, _, _ := e.store.Load(ctx)
	e.store.Ack(ctx, "behind", v1.Version+1, time.Minute) // it follows the next announcement
	rep, err := m.Copy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rows == 0 || e.count("s1", "orders", []int{1}) == 0 {
		t.Fatalf("nothing copied once every process followed: %+v", rep)
	}
}
