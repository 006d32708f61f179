package integration_test

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAbandonedCommitNeverReadsStale: two processes share a Redis store.
// A's transaction updates item 1 and sends COMMIT, which the server holds
// (a deferred constraint trigger waits for an advisory lock the test
// holds, as a COMMIT waits for a synchronous standby or arrives late
// through a slow network); A's context ends first, so A gets an error and
// the COMMIT's outcome is unknown to it. The replicas then replay
// everything written so far and pause. The test lets the COMMIT finish:
// the row changes on the primary well after A gave up. Once A has
// published what it holds, B's reads of the row must return the committed
// value. Before A followed the COMMIT's server process to its end, A
// published the write at its next poll, before the commit, and B read the
// row stale from the replicas that had replayed up to that position.
func TestAbandonedCommitNeverReadsStale(t *testing.T) {
	store, _ := newRedisStore(t, "abandoned-"+t.Name())
	e := newEnv(t, withStore(store))
	a, pa := e.open(withStore(store))
	b, _ := e.open(withStore(store))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	const lockKey = 731_942 // the advisory lock the trigger waits for
	createHeldCommitTrigger(t, e, lockKey)
	// A has written once (what its first write learns is learnt).
	if err := a.Create(&Item{ID: 2, Name: "warm"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.eventuallyReplica(func() served { return e.readItem(b, 1) }, "B before the write")

	// The test's own session holds the lock the COMMIT will wait for.
	sqlDB, err := e.db.DB()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	holder, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			_, _ = holder.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", lockKey)
		}
	}()

	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = a.WithContext(wctx).Model(&Item{ID: 1}).Update("name", "held").Error
	cancel()
	if err == nil {
		t.Fatal("A's transaction committed while its COMMIT waited for the lock the test holds")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("A's COMMIT failed with %v (its context ended during it)", err)
	}
	if got := readPrimaryName(t, e, 1); got != "old" {
		t.Fatalf("the row on the primary while the COMMIT waits: %q, want \"old\"", got)
	}
	// The held transaction's WAL records may sit in a page nobody flushes
	// while it waits (the WAL writer flushes up to the last commit): a
	// commit of another table flushes them, so that the replicas can reach
	// the primary's position, the floor the store's invalidation set.
	if err := e.db.Exec("UPDATE others SET note = note WHERE id = 1").Error; err != nil {
		t.Fatal(err)
	}
	// A's poller has had polls to publish the write by now; the replicas
	// replay all of it, then pause before the commit.
	time.Sleep(200 * time.Millisecond)
	e.resumeAll()
	e.pauseAll()
	// B reads the row from a replica (the value before the COMMIT, which
	// has not taken effect): its view of the replicas is past whatever
	// position its reads of the row wait for.
	if got := e.eventuallyReplica(func() served { return e.readItem(b, 1) }, "B before the COMMIT finished"); got.Name != "old" {
		t.Fatalf("B read %+v before the COMMIT finished, want \"old\"", got)
	}

	if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", lockKey); err != nil {
		t.Fatal(err)
	}
	released = true
	deadline := time.Now().Add(10 * time.Second)
	for readPrimaryName(t, e, 1) != "held" {
		if time.Now().After(deadline) {
			t.Fatal("the held COMMIT never committed once the lock was released: the test exercised nothing")
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitNoPending(t, pa)
	for i := range 5 {
		if got := e.readItem(b, 1); got.Name != "held" {
			t.Fatalf("B's read %d after the abandoned COMMIT finished and A published: STALE READ %+v", i, got)
		}
	}
	if got := e.readItem(a, 1); got.Name != "held" {
		t.Fatalf("A's own read: STALE READ %+v", got)
	}
}

// readPrimaryName reads item id's name on the primary, without the plugin.
func readPrimaryName(t *testing.T, e *env, id uint) string {
	t.Helper()
	sqlDB, err := e.db.DB()
	if err != nil {
		t.Fatal(err)
	}
	q := "SELECT name FROM items WHERE id = $1"
	if e.pg == nil {
		q = "SELECT name FROM items WHERE id = ?"
	}
	var name string
	if err := sqlDB.QueryRowContext(context.Background(), q, id).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}
