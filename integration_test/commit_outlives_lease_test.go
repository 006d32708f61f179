package integration_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"

	"github.com/freshread/freshread/plugin"
)

// TestCommitOutlivingLeaseNeverReadsStale: process A reaches Redis through
// a relay the test cuts, B directly. A's transaction updates item 1 and
// sends COMMIT while its lease is fresh; the server holds the COMMIT (a
// deferred trigger waits for an advisory lock the test holds, as a COMMIT
// waits for a synchronous standby or arrives late through the network),
// and A gives up on it. The test then cuts A from Redis until A's lease
// has lapsed and B has verified the store again, lets the replicas replay
// everything and pauses them, and only then lets the COMMIT go on.
// Whatever A was told, B's read of the row must return what the primary
// holds. Before B ended the lapsed writer's connections ahead of its
// floor, the COMMIT committed after B's floor, A could not publish it,
// and B read the row stale from the paused replicas.
func TestCommitOutlivingLeaseNeverReadsStale(t *testing.T) {
	// Each way a write commits: GORM's transaction (its COMMIT is given
	// up on after PublishTimeout), an autocommit statement, raw or GORM's
	// with SkipDefaultTransaction, on the pool or on a pinned connection,
	// whose caller gives up on it, and a
	// transaction GORM begins on a pinned connection (a *sql.Tx); the
	// first two with a prepared-statement pool made at Open too (GORM's
	// PrepareStmt: its transactions are *sql.Tx, their COMMIT unfolded).
	bounced := false // the engine is postgres-pgbouncer
	giveUp := func(db *gorm.DB) *gorm.DB {
		if db.Dialector.Name() == "mysql" || bounced {
			// MariaDB ends a statement whose client closed the
			// connection while its commit waits (the MySQL driver closes
			// it when the context ends), and so does PgBouncer (it closes
			// the server connection): the write waits instead, and
			// returns after its commit, late.
			return db
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		t.Cleanup(cancel)
		return db.WithContext(ctx)
	}
	update := func(a *gorm.DB) error { return a.Model(&Item{ID: 1}).Update("name", "held").Error }
	autocommit := func(a *gorm.DB) error {
		return giveUp(a).Exec("UPDATE items SET name = 'held' WHERE id = 1").Error
	}
	writes := map[string]struct {
		write    func(a *gorm.DB) error
		prepared bool
	}{
		"transaction": {write: update},
		"autocommit":  {write: autocommit},
		"pinned": {write: func(a *gorm.DB) error {
			return giveUp(a).Connection(func(c *gorm.DB) error {
				return c.Exec("UPDATE items SET name = 'held' WHERE id = 1").Error
			})
		}},
		"pinned-transaction": {write: func(a *gorm.DB) error {
			return giveUp(a).Connection(func(c *gorm.DB) error {
				return c.Transaction(func(tx *gorm.DB) error {
					return tx.Exec("UPDATE items SET name = 'held' WHERE id = 1").Error
				})
			})
		}},
		"skip-default-transaction": {write: func(a *gorm.DB) error {
			return giveUp(a).Session(&gorm.Session{SkipDefaultTransaction: true}).Model(&Item{ID: 1}).Update("name", "held").Error
		}},
		"prepared-transaction": {write: update, prepared: true},
		"prepared-autocommit":  {write: autocommit, prepared: true},
	}
	for _, engine := range []string{"postgres", "mariadb", "postgres-pgbouncer"} {
		t.Run(engine, func(t *testing.T) {
			bounced = engine == "postgres-pgbouncer"
			for name, w := range writes {
				if engine == "postgres-pgbouncer" && !bouncedTagged[name] {
					continue
				}
				t.Run(name, func(t *testing.T) {
					var opts []envOpt
					if w.prepared {
						opts = append(opts, withPrepareStmt())
					}
					if engine == "postgres-pgbouncer" {
						// PgBouncer closes the server connection of a
						// client that gives up during its COMMIT, which
						// ends the COMMIT: the writer waits for it
						// instead, as a slow COMMIT's does.
						opts = append(opts, withConfig(func(c *plugin.Config) { c.PublishTimeout = 10 * time.Second }))
					}
					commitOutlivingLease(t, engine, w.write, opts...)
				})
			}
		})
	}
}

// bouncedTagged are the shapes tagged behind a pooler in transaction mode
// (postgres-pgbouncer: PgBouncer, pgx in simple_protocol): transactions,
// and autocommit writes from the pool or on a pinned connection, which the
// plugin runs in a transaction of its own there. A transaction GORM
// begins on a pinned connection, and one behind the prepared pool, are
// not run there: PgBouncer in transaction mode does not keep named
// prepared statements.
var bouncedTagged = map[string]bool{"transaction": true, "autocommit": true, "skip-default-transaction": true, "pinned": true}

// commitHold holds the COMMITs of a test's writes in the server until
// released: on PostgreSQL the COMMIT of an update of items that sets name
// to "held" (a deferred trigger waiting for an advisory lock), on MariaDB
// every COMMIT (BACKUP STAGE BLOCK_COMMIT on a connection of the test's).
type commitHold struct {
	// wait waits until n COMMITs are held and returns the server sessions
	// holding them (PostgreSQL process IDs, MariaDB thread IDs); an error
	// when write ended first.
	wait func(n int, write <-chan error) ([]int64, error)
	// running counts those of sessions the server still runs.
	running func(sessions []int64) (int, error)
	release func() error
}

func holdCommits(t *testing.T, e *env) commitHold {
	t.Helper()
	ctx := context.Background()
	if e.pg != nil {
		const lockKey = 731_943
		createHeldCommitTrigger(t, e, lockKey)
		holder := holdAdvisoryLock(t, e, lockKey)
		primary, err := e.db.DB() // the primary's pool, without the plugin
		if err != nil {
			t.Fatal(err)
		}
		return commitHold{
			wait: func(n int, write <-chan error) ([]int64, error) {
				if err := waitLockWaiters(e, lockKey, n, write); err != nil {
					return nil, err
				}
				return querySessions(primary, "SELECT pid FROM pg_locks WHERE "+advisoryWaiters, lockKey)
			},
			running: func(sessions []int64) (int, error) {
				var n int
				err := primary.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)", sessions).Scan(&n)
				return n, err
			},
			release: func() error {
				_, err := holder.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", lockKey)
				return err
			},
		}
	}
	sqlDB, err := e.db.DB()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	for _, stage := range []string{"START", "FLUSH", "BLOCK_DDL", "BLOCK_COMMIT"} {
		if _, err := conn.ExecContext(ctx, "BACKUP STAGE "+stage); err != nil {
			t.Fatal(err)
		}
	}
	return commitHold{
		wait: func(n int, write <-chan error) ([]int64, error) {
			deadline := time.Now().Add(10 * time.Second)
			for {
				waiting, err := querySessions(sqlDB, "SELECT ID FROM information_schema.PROCESSLIST WHERE STATE LIKE 'Waiting for backup lock%'")
				if err != nil {
					return nil, err
				}
				if len(waiting) >= n {
					return waiting, nil
				}
				select {
				case err := <-write:
					return nil, fmt.Errorf("the write ended (%v) before its COMMIT waited for the backup lock", err)
				default:
				}
				if time.Now().After(deadline) {
					return nil, fmt.Errorf("%d sessions wait for the backup lock after 10 s, want %d", len(waiting), n)
				}
				time.Sleep(10 * time.Millisecond)
			}
		},
		running: func(sessions []int64) (int, error) {
			running := 0
			for _, id := range sessions {
				var n int
				if err := sqlDB.QueryRow("SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n); err != nil {
					return 0, err
				}
				running += n
			}
			return running, nil
		},
		release: func() error {
			_, err := conn.ExecContext(ctx, "BACKUP STAGE END")
			return err
		},
	}
}

func commitOutlivingLease(t *testing.T, engine string, write func(a *gorm.DB) error, aOpts ...envOpt) {
	const lease = 1500 * time.Millisecond
	e, a, pa, b, relay := writerCutPlugins(t, engine, lease, aOpts...)
	seedItem(t, e, b, 1)
	seedItem(t, e, b, 2)
	hold := holdCommits(t, e)

	done := make(chan error, 1)
	go func() { done <- write(a) }()
	held, err := hold.wait(1, done)
	if err != nil {
		t.Fatal(err)
	}

	relay.Partition(true)
	defer relay.Partition(false)
	// A's lease lapses; B's next verification finds it and takes its
	// floor. A commit elsewhere flushes the WAL the held transaction
	// wrote, so that the replicas can reach that floor.
	time.Sleep(2*lease + 500*time.Millisecond)
	if e.pg != nil {
		flushWAL(t, e)
	}
	e.waitCaughtUp()
	e.eventuallyReplica(func() served { return e.readItem(b, 2) }, "B after A's lease lapsed")
	// B took its floor only once no connection of A's lapsed lease was
	// left: the session holding A's COMMIT was ended (it may take a moment
	// to exit), so that COMMIT never lands after B's floor.
	if err := heldSessionsEnded(hold, held); err != nil {
		t.Fatalf("B reads from replicas again after A's lease lapsed, yet %v: the fence left a COMMIT of A's that may land after B's floor", err)
	}
	e.pauseAll()
	defer e.resumeAll()

	if err := hold.release(); err != nil {
		t.Fatal(err)
	}
	var writeErr error
	select {
	case writeErr = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("A's Update did not return 30 s after its COMMIT could go on")
	}
	truth := readPrimaryName(t, e, 1)
	got := e.readItem(b, 1)
	t.Logf("A's Update: %v; the primary holds %q; B read %q from port %d", writeErr, truth, got.Name, got.Port)
	if got.Name != truth {
		t.Fatalf("B read %q while the primary holds %q (A's Update returned %v): STALE READ", got.Name, truth, writeErr)
	}
	if writeErr == nil && truth != "held" {
		t.Fatalf("A acknowledged its Update, but the primary holds %q", truth)
	}
	if writeErr == nil {
		// Acknowledged: then it must have been covered, not merely lucky.
		if n := pluginMetric(t, pa, "freshread_writes_unprotected_total"); n != 0 {
			t.Fatalf("freshread_writes_unprotected_total = %v", n)
		}
	}
}

// TestLiveWriterKeepsItsConnections: a process that verifies the store
// after a discontinuity (here: a new process starting, the anchor deleted
// under a running one, and the store losing its data, leases included, as
// after FLUSHALL or a restart) ends only the connections of writers whose
// lease lapsed: a live writer's transaction, open across all three,
// commits. A lease lost with the data is not a lapse: its process
// publishes its writes as ever.
func TestLiveWriterKeepsItsConnections(t *testing.T) {
	database := "live-" + t.Name()
	store, r := newRedisStore(t, database)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rdb.Close()
	e := newEnv(t, withStore(store))
	a, _ := e.open(withStore(store))
	b, pb := e.open(withStore(store))
	seedItem(t, e, b, 1)
	seedItem(t, e, b, 2)
	err := a.Transaction(func(tx *gorm.DB) error {
		if err := tx.Model(&Item{ID: 1}).Update("name", "kept").Error; err != nil {
			return err
		}
		// The open transaction's WAL may sit in a page only a commit
		// flushes; the replicas must reach the positions read next.
		flushWAL(t, e)
		// A new process verifies the store for the first time.
		c, _ := e.open(withStore(store))
		e.eventuallyReplica(func() served { return e.readItem(c, 2) }, "a new process")
		// Every process sees the store change: the anchor deleted, then
		// the store's keys lost (the leases among them).
		base := "freshread:{" + database + "}-"
		for _, lose := range [][]string{{base + "anchor"}, {base + "anchor", base + "leases", base + "leases-lapsed"}} {
			before := pluginMetric(t, pb, "freshread_store_discontinuities_total")
			if err := rdb.Del(context.Background(), lose...).Err(); err != nil {
				return err
			}
			deadline := time.Now().Add(10 * time.Second)
			for pluginMetric(t, pb, "freshread_store_discontinuities_total") == before {
				if time.Now().After(deadline) {
					return fmt.Errorf("B never saw %v deleted", lose)
				}
				time.Sleep(10 * time.Millisecond)
			}
			flushWAL(t, e)
			e.eventuallyReplica(func() served { return e.readItem(b, 2) }, fmt.Sprintf("B after %v deleted", lose))
		}
		return tx.Model(&Item{ID: 2}).Update("name", "kept").Error
	})
	if err != nil {
		t.Fatalf("a live writer's transaction across two discontinuities: %v", err)
	}
	for _, id := range []uint{1, 2} {
		if got := readPrimaryName(t, e, id); got != "kept" {
			t.Fatalf("item %d on the primary: %q, want \"kept\"", id, got)
		}
	}
}

// heldSessionsEnded waits up to 5 s until the server runs none of the
// sessions that held a COMMIT; an error naming them when it still does.
func heldSessionsEnded(hold commitHold, sessions []int64) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := hold.running(sessions)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server still runs %d of the sessions %v that hold A's COMMIT", n, sessions)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// querySessions returns the session IDs a query lists.
func querySessions(db *sql.DB, query string, args ...any) ([]int64, error) {
	rows, err := db.Query(query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// holdAdvisoryLock takes advisory lock key on a connection of the test's
// own, straight to the primary server (a pooler in transaction mode would
// leave a session lock with a server connection others then use),
// released when the test ends (or earlier by the caller, on the connection
// returned).
func holdAdvisoryLock(t *testing.T, e *env, key int) *sql.Conn {
	t.Helper()
	sqlDB, err := sql.Open("pgx", e.pg.PrimaryDSN(e.dbName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	conn, err := sqlDB.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.ExecContext(context.Background(), "SELECT pg_advisory_lock($1)", key); err != nil {
		t.Fatal(err)
	}
	return conn
}

// advisoryWaiters selects the rows of pg_locks of sessions waiting for
// advisory lock $1 in the test's database (a lock of another test's
// database is another lock).
const advisoryWaiters = "locktype = 'advisory' AND NOT granted AND objid = $1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"

// waitLockWaiters waits until n sessions wait for advisory lock key in
// the test's database (advisoryWaiters); an error when write (the write
// expected to wait) ended first.
func waitLockWaiters(e *env, key, n int, write <-chan error) error {
	primary, err := e.db.DB() // the primary's pool, without the plugin
	if err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := primary.QueryRow("SELECT count(*) FROM pg_locks WHERE "+advisoryWaiters, key).Scan(&waiting); err != nil {
			return err
		}
		if waiting >= n {
			return nil
		}
		select {
		case err := <-write:
			return fmt.Errorf("the write ended (%v) before its COMMIT waited for advisory lock %d", err, key)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d sessions wait for advisory lock %d after 10 s, want %d", waiting, key, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// heldCommitCancels is how many cancel requests held COMMITs have absorbed
// while they waited (createHeldCommitTrigger): a sequence, which no
// rollback undoes.
func heldCommitCancels(t *testing.T, e *env) int64 {
	t.Helper()
	sqlDB, err := e.db.DB()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := sqlDB.QueryRow("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM held_commit_cancels").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// flushWAL commits a write of another table, which flushes the WAL an
// open transaction wrote (the WAL writer flushes up to the last commit):
// the replicas can then replay up to the primary's insert position.
func flushWAL(t *testing.T, e *env) {
	t.Helper()
	if err := e.db.Exec("UPDATE others SET note = note WHERE id = 1").Error; err != nil {
		t.Fatal(err)
	}
}

// createHeldCommitTrigger makes every COMMIT of an update of items that
// sets name to "held" wait for advisory lock key (a deferred constraint
// trigger). The client's cancel request (pgx sends one when it gives up
// on the COMMIT) does not end the wait: the COMMIT stays with the server,
// as one the network delivers late, or one waiting for a synchronous
// standby, does. Each cancel the wait absorbs advances the sequence
// held_commit_cancels (heldCommitCancels).
func createHeldCommitTrigger(t *testing.T, e *env, key int) {
	t.Helper()
	for _, q := range []string{
		`CREATE SEQUENCE held_commit_cancels`,
		fmt.Sprintf(`CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN
		   IF NEW.name = 'held' THEN
		     LOOP
		       BEGIN
		         PERFORM pg_advisory_xact_lock(%d);
		         EXIT;
		       EXCEPTION WHEN query_canceled THEN
		         PERFORM nextval('held_commit_cancels');
		       END;
		     END LOOP;
		   END IF;
		   RETURN NULL;
		 END $$`, key),
		`CREATE CONSTRAINT TRIGGER held_commit AFTER UPDATE ON items
		 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hold_commit()`,
	} {
		if err := e.db.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
}

// TestPrimaryReadRetriedOnEndedConnection: a read on the primary whose
// pooled connection another process ended (as the writer fence ends a
// lapsed process's connections, or an administrator does) runs again on
// another connection, through GORM's Query chain (First) and its Row
// chain (Scan, Rows), instead of failing. The connections are ended just
// before the reads, so that pgx's own check of a connection idle for a
// second does not catch them first.
func TestPrimaryReadRetriedOnEndedConnection(t *testing.T) {
	e := newEnv(t)
	seedItem(t, e, e.db, 1)
	// A process whose poller does not use the pool meanwhile (its
	// queries would meet the ended connections first).
	a, _ := e.open(withConfig(func(c *plugin.Config) { c.PollInterval = time.Hour }))
	reads := map[string]func(db *gorm.DB) (string, error){
		"first": func(db *gorm.DB) (string, error) {
			var it Item
			err := db.First(&it, 1).Error
			return it.Name, err
		},
		"scan": func(db *gorm.DB) (string, error) {
			var name string
			err := db.Table("items").Select("name").Where("id = ?", 1).Scan(&name).Error
			return name, err
		},
		"rows": func(db *gorm.DB) (string, error) {
			rows, err := db.Table("items").Select("name").Where("id = ?", 1).Rows()
			if err != nil {
				return "", err
			}
			defer rows.Close()
			var name string
			for rows.Next() {
				if err := rows.Scan(&name); err != nil {
					return "", err
				}
			}
			return name, rows.Err()
		},
	}
	for name, read := range reads {
		t.Run(name, func(t *testing.T) {
			onPrimary := a.Clauses(dbresolver.Write)
			// Warm the pool: several idle connections to the primary.
			for range 4 {
				if _, err := read(onPrimary); err != nil {
					t.Fatal(err)
				}
			}
			killer, err := sql.Open("pgx", e.pg.PrimaryDSN(e.dbName))
			if err != nil {
				t.Fatal(err)
			}
			defer killer.Close()
			var ended int
			if err := killer.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`).Scan(&ended); err != nil {
				t.Fatal(err)
			}
			if ended == 0 {
				t.Fatal("no connection to end: the test exercises nothing")
			}
			time.Sleep(50 * time.Millisecond) // the servers' FATAL messages arrive
			got, err := read(onPrimary)
			if err != nil {
				t.Fatalf("a read on the primary after %d of its connections were ended: %v", ended, err)
			}
			if got != "old" {
				t.Fatalf("the read returned %q, want \"old\"", got)
			}
		})
	}
}
