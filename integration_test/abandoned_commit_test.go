package integration_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/lib/sqlerr"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// TestAbandonedCommitNeverReadsStale: two processes share a Redis store.
// A's transaction updates item 1 and sends COMMIT, which the server holds
// (a deferred constraint trigger waits for an advisory lock the test
// holds, as a COMMIT waits for a synchronous standby or arrives late
// through a slow network); A's context ends while the COMMIT waits, so A
// gets an error and the COMMIT's outcome is unknown to it, and A's client
// cancels it, which the waiting COMMIT absorbs (PgBouncer may drop the
// cancel: the COMMIT then simply waits on). The replicas then replay
// everything written so far and pause. The test lets the COMMIT finish:
// the row changes on the primary well after A gave up. Once A has
// published what it holds, B's reads of the row must return the committed
// value. Before A followed the COMMIT's server process to its end, A
// published the write at its next poll, before the commit, and B read the
// row stale from the replicas that had replayed up to that position. A
// cancel that arrives only after the release can end the COMMIT instead:
// such a round checks nothing, and runs again (at most three rounds).
//
// Each way the plugin begins a transaction: folded with pgx straight to
// the primary (the connection's PID names the server process), through
// GORM's prepared-statement pool made at Open (a *sql.Tx), and behind
// PgBouncer in transaction mode (the PID is PgBouncer's own): the last two
// learn the server process from the statement that takes the writer tag.
// And autocommit writes (their COMMIT is the statement's own): from the
// pool, through the prepared pool, on a connection pinned with
// db.Connection (each through a connection tagged for the statement, whose
// PID the plugin knows), and behind PgBouncer (in a transaction of the
// plugin's own). With the in-memory store (one process: A reads its own
// write), whose writes take no writer tag, transactions are followed as
// with Redis (straight to the primary and behind PgBouncer) and
// autocommit writes run on a connection pinned for them all the same.
func TestAbandonedCommitNeverReadsStale(t *testing.T) {
	update := func(a *gorm.DB) error { return a.Model(&Item{ID: 1}).Update("name", "held").Error }
	raw := func(a *gorm.DB) error { return a.Exec("UPDATE items SET name = 'held' WHERE id = 1").Error }
	pinnedRaw := func(a *gorm.DB) error { return a.Connection(func(c *gorm.DB) error { return raw(c) }) }
	for _, v := range []struct {
		name, engine string
		write        func(a *gorm.DB) error
		opts         []envOpt
		alone        bool // A alone, with the in-memory store, reads its write
	}{
		{"postgres", "postgres", update, nil, false},
		{"prepared", "postgres", update, []envOpt{withPrepareStmt()}, false},
		{"postgres-pgbouncer", "postgres-pgbouncer", update, nil, false},
		{"autocommit", "postgres", raw, nil, false},
		{"prepared-autocommit", "postgres", raw, []envOpt{withPrepareStmt()}, false},
		{"postgres-pgbouncer-autocommit", "postgres-pgbouncer", raw, nil, false},
		{"pinned-autocommit", "postgres", pinnedRaw, nil, false},
		{"postgres-pgbouncer-pinned-autocommit", "postgres-pgbouncer", pinnedRaw, nil, false},
		{"memory", "postgres", update, nil, true},
		{"memory-pgbouncer", "postgres-pgbouncer", update, nil, true},
		{"memory-autocommit", "postgres", raw, nil, true},
		{"memory-prepared-autocommit", "postgres", raw, []envOpt{withPrepareStmt()}, true},
		{"memory-pinned-autocommit", "postgres", pinnedRaw, nil, true},
		{"memory-pgbouncer-autocommit", "postgres-pgbouncer", raw, nil, true},
		{"memory-pgbouncer-pinned-autocommit", "postgres-pgbouncer", pinnedRaw, nil, true},
	} {
		t.Run(v.name, func(t *testing.T) { abandonedCommitNeverReadsStale(t, v.engine, v.write, v.alone, v.opts...) })
	}
}

func abandonedCommitNeverReadsStale(t *testing.T, engine string, write func(a *gorm.DB) error, alone bool, aOpts ...envOpt) {
	var e *env
	var a, b *gorm.DB
	var pa, pb *plugin.Plugin
	if alone {
		e = newEngineEnv(t, engine)
		a, pa = e.open(append([]envOpt{withStore(lsnstore.NewMemory())}, aOpts...)...)
		b = a
	} else {
		store, _ := newRedisStore(t, "abandoned-"+t.Name())
		e = newEngineEnv(t, engine, withStore(store))
		a, pa = e.open(append([]envOpt{withStore(store)}, aOpts...)...)
		b, pb = e.open(withStore(store))
	}
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	const lockKey = 731_942 // the advisory lock the trigger waits for
	createHeldCommitTrigger(t, e, lockKey)
	// A has written once (what its first write learns is learnt).
	if err := a.Create(&Item{ID: 2, Name: "warm"}).Error; err != nil {
		t.Fatal(err)
	}
	// A round whose COMMIT a late cancel ended (heldCommitRound) checks
	// nothing: it runs again, at most three times.
	const rounds = 3
	for round := 1; !heldCommitRound(t, e, a, b, pb, write, alone, lockKey); round++ {
		if round == rounds {
			t.Fatalf("in %d rounds, the held COMMIT never committed once the lock was released: the test exercised nothing", rounds)
		}
		t.Logf("round %d: the held COMMIT did not commit once the lock was released (most likely a cancel that arrived after the release ended it); again", round)
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

// heldCommitRound is one round of TestAbandonedCommitNeverReadsStale, up
// to the held COMMIT's end: it reports whether the COMMIT committed once
// the lock was released. A COMMIT that did not (a cancel that a slow
// machine delivered after the release ended it) leaves nothing to check.
func heldCommitRound(t *testing.T, e *env, a, b *gorm.DB, pb *plugin.Plugin, write func(a *gorm.DB) error, alone bool, lockKey int) bool {
	t.Helper()
	e.resumeAll()
	e.eventuallyReplica(func() served { return e.readItem(b, 1) }, "B before the write")

	// The test's own session holds the lock the COMMIT will wait for.
	ctx := context.Background()
	holder := holdAdvisoryLock(t, e, lockKey)
	released := false
	defer func() {
		if !released {
			_, _ = holder.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", lockKey)
		}
		_ = holder.Close()
	}()

	// A gives up once its COMMIT waits for the lock, not after a fixed
	// time: a slow machine could end A's context before the COMMIT was
	// sent, and the transaction would roll back instead.
	var told float64 // B's store discontinuities before A gives up
	if pb != nil {
		told = pluginMetric(t, pb, "freshread_store_discontinuities_total")
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- write(a.WithContext(wctx)) }()
	if err := waitLockWaiters(e, lockKey, 1, done); err != nil {
		t.Fatal(err)
	}
	cancels := heldCommitCancels(t, e)
	cancel()
	err := <-done
	// pgx sends its cancel request from a goroutine of its own once A's
	// statement returned: the lock is released only once the waiting
	// COMMIT has absorbed it, if it comes. A cancel that a slow machine
	// delivered after the release could land after the wait and end the
	// COMMIT (the round then checks nothing). Behind PgBouncer the cancel
	// may never arrive (seen with PgBouncer 1.18, once in a few dozen
	// runs): the COMMIT then waits on and commits at the release.
	for deadline := time.Now().Add(10 * time.Second); heldCommitCancels(t, e) == cancels; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Logf("A's client's cancel request never reached its waiting COMMIT in 10 s; going on without it%s", bouncerLog(e))
			break
		}
	}
	if err == nil {
		t.Fatal("A's transaction committed while its COMMIT waited for the lock the test holds")
	}
	if !errors.Is(err, context.Canceled) {
		t.Logf("A's COMMIT failed with %v (its context ended during it)", err)
	}
	if got := readPrimaryName(t, e, 1); got != "old" {
		t.Fatalf("the row on the primary while the COMMIT waits: %q, want \"old\"", got)
	}
	// B has taken A's word that a write is unpublished (its floor, the
	// primary's position then) before the replicas catch up and pause: a
	// floor B took later (a follower of the shared poll checks the store
	// at its next refresh) could lie past the paused replicas, after WAL
	// that even reads write on the primary (page pruning).
	if pb != nil {
		deadline := time.Now().Add(10 * time.Second)
		for pluginMetric(t, pb, "freshread_store_discontinuities_total") == told {
			if time.Now().After(deadline) {
				t.Fatal("B never learnt that A holds a write it could not publish")
			}
			time.Sleep(5 * time.Millisecond)
		}
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
	e.waitCaughtUp()
	e.pauseAll()
	// B reads the row from a replica (the value before the COMMIT, which
	// has not taken effect): its view of the replicas is past whatever
	// position its reads of the row wait for. A alone reads it where its
	// held write sends it.
	if alone {
		if got := e.readItem(b, 1); got.Name != "old" {
			t.Fatalf("A read %+v before the COMMIT finished, want \"old\"", got)
		}
	} else if got := e.eventuallyReplica(func() served { return e.readItem(b, 1) }, "B before the COMMIT finished"); got.Name != "old" {
		t.Fatalf("B read %+v before the COMMIT finished, want \"old\"", got)
	}

	if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", lockKey); err != nil {
		t.Fatal(err)
	}
	released = true
	deadline := time.Now().Add(10 * time.Second)
	for readPrimaryName(t, e, 1) != "held" {
		if time.Now().After(deadline) {
			t.Logf("the held COMMIT never committed once the lock was released (the database's sessions: %s)%s", sessionsOf(t, e), bouncerLog(e))
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// bouncerLog is the end of the primary's PgBouncer log behind a bounced
// env, for a message; "" otherwise.
func bouncerLog(e *env) string {
	if c, ok := e.c.(bouncedCluster); ok {
		return "; PgBouncer's log:\n" + c.b.PrimaryLog(20)
	}
	return ""
}

// sessionsOf describes the test database's sessions on the primary, for
// a failure's message.
func sessionsOf(t *testing.T, e *env) string {
	t.Helper()
	sqlDB, err := e.db.DB()
	if err != nil {
		return err.Error()
	}
	rows, err := sqlDB.Query(`SELECT format('pid %s %s (%s) xid %s: %s', pid, state, wait_event, backend_xid, left(query, 60))
		FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return err.Error()
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
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
	// The pool is e.db's, whose connections another process's writer
	// fence may have ended (e.db's plugin writes too, and a test may let
	// every lease lapse); a connection found ended is dropped and the read
	// runs again on another.
	var name string
	for range 3 {
		if err = sqlDB.QueryRowContext(context.Background(), q, id).Scan(&name); !sqlerr.EndedByOther(err) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// TestFailedAutocommitWriteOutcomeKnown: an autocommit write that fails
// with its outcome known (GORM refuses it before sending anything, a hook
// fails, the server refuses it) is not taken for one the client gave up
// on: the writer holds nothing and tells no one, so the other processes
// keep the store (each "unpublished" write deletes the store's anchor,
// and every process then reads from the primary until it verified the
// store again).
func TestFailedAutocommitWriteOutcomeKnown(t *testing.T) {
	store, _ := newRedisStore(t, "known-"+t.Name())
	e := newEnv(t, withStore(store))
	a, pa := e.open(withStore(store))
	_, pb := e.open(withStore(store))
	seedItem(t, e, a, 1)
	before := pluginMetric(t, pb, "freshread_store_discontinuities_total")
	auto := a.Session(&gorm.Session{SkipDefaultTransaction: true})
	failures := map[string]func() error{
		"missing WHERE": func() error { return auto.Model(&Item{}).Update("name", "x").Error },
		"duplicate key": func() error { return auto.Create(&Item{ID: 1, Name: "again"}).Error },
		"raw syntax":    func() error { return a.Exec("UPDATE items SET name = WHERE id = 1").Error },
		"raw arguments": func() error { return a.Exec("UPDATE items SET name = ? WHERE id = ?", "x").Error },
	}
	for name, write := range failures {
		if err := write(); err == nil {
			t.Fatalf("%s: the write succeeded", name)
		}
		if n := pluginMetric(t, pa, "freshread_unpublished_writes"); n != 0 {
			t.Fatalf("%s: the writer holds %v unpublished writes after a write whose outcome it knows", name, n)
		}
	}
	// A poll of B's would have seen a deleted anchor by now.
	time.Sleep(200 * time.Millisecond)
	if after := pluginMetric(t, pb, "freshread_store_discontinuities_total"); after != before {
		t.Fatalf("B saw %v store discontinuities after writes whose outcome A knew", after-before)
	}
}
