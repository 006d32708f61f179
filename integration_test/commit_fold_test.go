package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// TestFoldedCommitCoversCommitRecord: on PostgreSQL a transaction's COMMIT
// and the position read share one message, and the position published is
// at or past the end of the transaction's commit record in the WAL (read
// back with pg_walinspect), so a replica that has replayed it has the
// transaction. Reading the position before COMMIT would fail here.
func TestFoldedCommitCoversCommitRecord(t *testing.T) {
	// No poller after the start: it would share the pool's connections
	// and overwrite the query pg_stat_activity shows.
	e := newEnv(t, withConfig(func(c *plugin.Config) { c.PollInterval = time.Hour }))
	ctx := e.ctx()
	admin := e.primarySQL()
	if _, err := admin.ExecContext(ctx, "CREATE EXTENSION IF NOT EXISTS pg_walinspect"); err != nil {
		t.Fatal(err)
	}
	var start string
	if err := admin.QueryRowContext(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&start); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 20; round++ {
		var xid string
		var pid int
		err := e.db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Raw("SELECT txid_current()::text, pg_backend_pid()").Row().Scan(&xid, &pid); err != nil {
				return err
			}
			return tx.Create(&Item{ID: uint(100 + round), Name: "new"}).Error
		})
		if err != nil {
			t.Fatal(err)
		}
		published, err := e.store.WritePosition(ctx, []string{"items"})
		if err != nil {
			t.Fatal(err)
		}
		var last string
		if err := admin.QueryRowContext(ctx, "SELECT query FROM pg_stat_activity WHERE pid = $1", pid).Scan(&last); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(last, "COMMIT; SELECT pg_current_wal_insert_lsn()") {
			t.Fatalf("round %d: the transaction's connection last ran %q, want COMMIT and the position in one message", round, last)
		}
		commitEnd := e.commitRecordEnd(admin, start, xid)
		if published.Main() < commitEnd {
			t.Fatalf("round %d: published position %s is below the end of the commit record %s: a replica at it would not have the transaction",
				round, published.Main(), commitEnd)
		}
	}
}

// commitRecordEnd finds the end of xid's commit record in the primary's
// WAL from start (waiting for it to be flushed).
func (e *env) commitRecordEnd(admin *sql.DB, start, xid string) lsnstore.LSN {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var end sql.NullString
		err := admin.QueryRowContext(e.ctx(), `
			SELECT max(end_lsn)::text FROM pg_get_wal_records_info($1::pg_lsn, pg_current_wal_flush_lsn())
			WHERE resource_manager = 'Transaction' AND record_type LIKE 'COMMIT%' AND xid::text = $2`, start, xid).Scan(&end)
		if err != nil {
			e.t.Fatal(err)
		}
		if end.Valid {
			l, err := lsnstore.ParseLSN(end.String)
			if err != nil {
				e.t.Fatal(err)
			}
			return l
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no commit record for xid %s in the WAL", xid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// primarySQL is a plain connection to the test database on the primary.
func (e *env) primarySQL() *sql.DB {
	e.t.Helper()
	g, err := gorm.Open(postgres.Open(e.pg.PrimaryDSN(e.dbName)), quiet())
	if err != nil {
		e.t.Fatal(err)
	}
	db, err := g.DB()
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { db.Close() })
	return db
}

// TestFoldedCommitFreshness: a transaction committed with the folded
// COMMIT is read fresh while replay is paused, and from a replica again
// once it has replayed.
func TestFoldedCommitFreshness(t *testing.T) {
	e := newEnv(t)
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.mustReplica(e.readItem(e.db, 1), "before the write")
	e.pauseAll()
	if err := e.db.Transaction(func(tx *gorm.DB) error { return setName(tx, 1) }); err != nil {
		t.Fatal(err)
	}
	got := e.readItem(e.db, 1)
	if got.Name != "new" {
		t.Fatalf("STALE READ after a folded commit: %+v", got)
	}
	e.mustPrimary(got, "replay paused")
	e.resumeAll()
	got = e.readItem(e.db, 1)
	if got.Name != "new" {
		t.Fatalf("STALE READ after replay resumed: %+v", got)
	}
	e.mustReplica(got, "after replay")
}

// TestFoldedCommitBehavesLikeSQLTx: what database/sql's Tx does, a folded
// transaction does too: a COMMIT of a failed transaction fails, a
// deferred constraint fails the commit, a cancelled context rolls back and
// returns the connection, options and savepoints work, and a statement
// after the end fails.
func TestFoldedCommitBehavesLikeSQLTx(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx()
	present := func(id uint) bool {
		t.Helper()
		var n int64
		if err := e.primaryGorm().Model(&Item{}).Where("id = ?", id).Count(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n > 0
	}

	t.Run("commit after an error", func(t *testing.T) {
		tx := e.db.Begin()
		if err := tx.Create(&Item{ID: 2, Name: "x"}).Error; err != nil {
			t.Fatal(err)
		}
		if err := tx.Exec("SELECT 1/0").Error; err == nil {
			t.Fatal("division by zero succeeded")
		}
		if err := tx.Commit().Error; err == nil {
			t.Fatal("COMMIT of a failed transaction returned no error")
		}
		if present(2) {
			t.Fatal("the failed transaction's row was committed")
		}
	})

	t.Run("deferred constraint", func(t *testing.T) {
		if err := e.db.Exec("CREATE TABLE uniq (v int UNIQUE DEFERRABLE INITIALLY DEFERRED)").Error; err != nil {
			t.Fatal(err)
		}
		tx := e.db.Begin()
		for i := 0; i < 2; i++ {
			if err := tx.Exec("INSERT INTO uniq VALUES (1)").Error; err != nil {
				t.Fatal(err)
			}
		}
		err := tx.Commit().Error
		if err == nil || !strings.Contains(err.Error(), "23505") {
			t.Fatalf("commit with a violated deferred constraint: %v, want a unique violation", err)
		}
		var n int64
		if err := e.primaryGorm().Table("uniq").Count(&n).Error; err != nil || n != 0 {
			t.Fatalf("uniq holds %d rows (%v), want 0", n, err)
		}
	})

	t.Run("cancelled context", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		tx := e.db.WithContext(cctx).Begin()
		if err := tx.Create(&Item{ID: 3, Name: "x"}).Error; err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := tx.Commit().Error; !errors.Is(err, context.Canceled) && !errors.Is(err, sql.ErrTxDone) {
			t.Fatalf("commit after cancel: %v, want context.Canceled", err)
		}
		if present(3) {
			t.Fatal("a cancelled transaction was committed")
		}
		e.waitNoConnInUse()
	})

	t.Run("abandoned with a cancelled context", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		tx := e.db.WithContext(cctx).Begin()
		if err := tx.Create(&Item{ID: 4, Name: "x"}).Error; err != nil {
			t.Fatal(err)
		}
		cancel() // nobody calls Commit or Rollback
		e.waitNoConnInUse()
		if present(4) {
			t.Fatal("an abandoned transaction was committed")
		}
	})

	t.Run("abandoned, cancelled by another goroutine", func(t *testing.T) {
		// The context's watch runs in a goroutine started by cancel, in a
		// goroutine that nothing orders after Begin (only a sleep): under
		// -race, the watch touching anything Begin wrote after it was
		// installed is reported (it read the watch's own stop function).
		// A Begin slower than the sleep fails with the cancel; the next
		// round sleeps longer.
		for _, d := range []time.Duration{50 * time.Millisecond, 500 * time.Millisecond, 5 * time.Second} {
			cctx, cancel := context.WithCancel(ctx)
			go func() {
				time.Sleep(d)
				cancel()
			}()
			tx := e.db.WithContext(cctx).Begin()
			if tx.Error != nil {
				if errors.Is(tx.Error, context.Canceled) {
					continue
				}
				t.Fatal(tx.Error)
			}
			<-cctx.Done()
			e.waitNoConnInUse()
			if err := tx.Commit().Error; err == nil {
				t.Fatal("commit of a transaction its context rolled back succeeded")
			}
			return
		}
		t.Fatal("Begin never finished before its context was cancelled")
	})

	t.Run("options", func(t *testing.T) {
		tx := e.db.Begin(&sql.TxOptions{Isolation: sql.LevelSerializable, ReadOnly: true})
		var iso string
		if err := tx.Raw("SHOW transaction_isolation").Scan(&iso).Error; err != nil || iso != "serializable" {
			t.Fatalf("isolation %q (%v), want serializable", iso, err)
		}
		if err := tx.Create(&Item{ID: 5, Name: "x"}).Error; err == nil || !strings.Contains(err.Error(), "25006") {
			t.Fatalf("write in a read-only transaction: %v, want 25006", err)
		}
		tx.Rollback()
		if err := e.db.Begin(&sql.TxOptions{Isolation: sql.LevelLinearizable}).Error; err == nil {
			t.Fatal("an unsupported isolation level was accepted")
		}
	})

	t.Run("savepoints", func(t *testing.T) {
		err := e.db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Create(&Item{ID: 6, Name: "kept"}).Error; err != nil {
				return err
			}
			_ = tx.Transaction(func(tx2 *gorm.DB) error {
				if err := tx2.Create(&Item{ID: 7, Name: "rolled back"}).Error; err != nil {
					return err
				}
				return errors.New("roll back the savepoint")
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !present(6) || present(7) {
			t.Fatalf("after a rolled-back savepoint: 6 present %v, 7 present %v; want true, false", present(6), present(7))
		}
	})

	t.Run("statement after the end", func(t *testing.T) {
		tx := e.db.Begin()
		if err := tx.Commit().Error; err != nil {
			t.Fatal(err)
		}
		if err := tx.Create(&Item{ID: 8, Name: "x"}).Error; err == nil {
			t.Fatal("a statement after COMMIT succeeded")
		}
		if present(8) {
			t.Fatal("a statement after COMMIT wrote")
		}
		e.waitNoConnInUse()
	})
}

// primaryGorm is a plain *gorm.DB on the test database's primary.
func (e *env) primaryGorm() *gorm.DB {
	e.t.Helper()
	g, err := gorm.Open(postgres.Open(e.pg.PrimaryDSN(e.dbName)), quiet())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { closeDB(g) })
	return g
}

// waitNoConnInUse waits until the plugin's primary pool has every
// connection back.
func (e *env) waitNoConnInUse() {
	e.t.Helper()
	db, err := e.db.DB()
	if err != nil {
		e.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for db.Stats().InUse != 0 {
		if time.Now().After(deadline) {
			e.t.Fatalf("%d primary connections still in use", db.Stats().InUse)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCommitUnknownOutcome: when COMMIT reaches the server but its answer
// never comes back (the connection times out), nobody knows whether the
// transaction committed; its tables are then treated as written: reads go
// to the primary, and see the commit, until the poller publishes a
// position for them. Folded (pgx) and plain *sql.Tx (prepared statements)
// commits alike; without it the read goes to the paused replica and is
// stale.
func TestCommitUnknownOutcome(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []envOpt
	}{{"folded", nil}, {"sql.Tx", []envOpt{withPrepareStmt()}}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts...)
			if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
				t.Fatal(err)
			}
			relay, primary := e.primaryViaRelay()
			db, _ := e.open(append([]envOpt{withPrimary(primary)}, tc.opts...)...)
			e.resumeAll()
			e.mustReplica(e.readItem(db, 1), "before")
			e.pauseAll()

			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			tx := db.WithContext(ctx).Begin()
			if err := setName(tx, 1); err != nil {
				t.Fatal(err)
			}
			relay.Stall(true)
			if err := tx.Commit().Error; err == nil {
				t.Fatal("COMMIT without an answer succeeded")
			}
			relay.Stall(false)
			var name string
			if err := e.primaryGorm().Model(&Item{}).Select("name").Where("id = 1").Scan(&name).Error; err != nil || name != "new" {
				t.Fatalf("on the primary the item is %q (%v): the COMMIT did not reach it, the test proves nothing", name, err)
			}
			got := e.readItem(db, 1)
			if got.Name != "new" {
				t.Fatalf("STALE READ after a commit of unknown outcome: %+v", got)
			}
			e.mustPrimary(got, "after a commit of unknown outcome")
			e.resumeAll()
			deadline := time.Now().Add(10 * time.Second)
			for got := e.readItem(db, 1); !e.isReplica(got.Port); got = e.readItem(db, 1) {
				if got.Name != "new" {
					t.Fatalf("STALE READ: %+v", got)
				}
				if time.Now().After(deadline) {
					t.Fatal("reads of the table never returned to a replica")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
