package integration_test

import (
	"context"
	"errors"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/plugin"
)

func port(t *testing.T, tx *gorm.DB) int {
	t.Helper()
	var p int
	if err := tx.Raw("SELECT inet_server_port()").Scan(&p).Error; err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSessionReplaysBufferedStateOnWrite: session state set on the replica
// (set_config, search_path) is replayed on the primary at the first write,
// visible in the written row.
func TestSessionReplaysBufferedStateOnWrite(t *testing.T) {
	e := newEnv(t)
	e.resumeAll()
	e.waitReplicaServes(e.db) // the session starts on a replica only once the poller has seen one
	err := e.plug.Session(context.Background(), e.db, func(tx *gorm.DB) error {
		if p := port(t, tx); !e.isReplica(p) {
			t.Fatalf("session did not start on a replica: port %d", p)
		}
		if err := tx.Exec("SELECT set_config('app.tag', 'from-session', false)").Error; err != nil {
			return err
		}
		if err := tx.Exec("SET search_path TO public").Error; err != nil {
			return err
		}
		if p := port(t, tx); !e.isReplica(p) {
			t.Fatalf("BUFFER statements moved the session: port %d", p)
		}
		if err := tx.Exec("INSERT INTO items (id, name) VALUES (9, current_setting('app.tag'))").Error; err != nil {
			return err
		}
		if p := port(t, tx); p != e.pg.PrimaryPort() {
			t.Fatalf("after the write the session is on port %d, want the primary", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var name string
	if err := e.db.Clauses().Raw("SELECT name FROM items WHERE id = 9").Scan(&name).Error; err != nil || name != "from-session" {
		t.Fatalf("written row name %q (err %v), want the replayed setting", name, err)
	}
}

// TestSessionTempTableMovesToPrimary: a PostgreSQL standby refuses CREATE
// TEMP TABLE; the session moves to the primary (replaying what it had) and
// INSERT ... SELECT FROM the temp table works there.
func TestSessionTempTableMovesToPrimary(t *testing.T) {
	e := newEnv(t)
	e.resumeAll()
	e.waitReplicaServes(e.db) // the session starts on a replica only once the poller has seen one
	err := e.plug.Session(context.Background(), e.db, func(tx *gorm.DB) error {
		if err := tx.Exec("SELECT set_config('app.tag', 'tmp', false)").Error; err != nil {
			return err
		}
		if err := tx.Exec("CREATE TEMP TABLE staging (id int, name text)").Error; err != nil {
			return err
		}
		if err := tx.Exec("INSERT INTO staging VALUES (21, current_setting('app.tag'))").Error; err != nil {
			return err
		}
		return tx.Exec("INSERT INTO items (id, name) SELECT id, name FROM staging").Error
	})
	if err != nil {
		t.Fatal(err)
	}
	var name string
	if err := e.db.Raw("SELECT name FROM items WHERE id = 21").Scan(&name).Error; err != nil || name != "tmp" {
		t.Fatalf("row from the temp table: %q (err %v)", name, err)
	}
}

// TestSessionReplayFailureWritesNothing: a buffered statement that fails
// when replayed on the primary aborts the session; the write is not run.
func TestSessionReplayFailureWritesNothing(t *testing.T) {
	e := newEnv(t)
	if err := e.db.Exec("CREATE TABLE doomed (x int)").Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.pauseAll()
	e.waitReplicaServes(e.db)
	raw, err := gorm.Open(postgres.Open(e.pg.PrimaryDSN(e.dbName)), quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB(raw)
	err = e.plug.Session(context.Background(), e.db, func(tx *gorm.DB) error {
		// On the paused replica the table still exists.
		if err := tx.Exec("PREPARE q AS SELECT * FROM doomed").Error; err != nil {
			return err
		}
		if err := raw.Exec("DROP TABLE doomed").Error; err != nil {
			t.Fatal(err)
		}
		return tx.Exec("INSERT INTO items (id, name) VALUES (31, 'must not exist')").Error
	})
	if !errors.Is(err, plugin.ErrSessionAborted) {
		t.Fatalf("session error %v, want ErrSessionAborted", err)
	}
	var n int64
	if err := raw.Raw("SELECT count(*) FROM items WHERE id = 31").Scan(&n).Error; err != nil || n != 0 {
		t.Fatalf("the write ran although the replay failed: %d rows (err %v)", n, err)
	}
}

// TestSessionMovesEarlyForFreshness: a session on a paused replica reads a
// table another process has written: it moves to the primary first and
// sees the write.
func TestSessionMovesEarlyForFreshness(t *testing.T) {
	e := newEnv(t)
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.pauseAll()
	e.waitReplicaServes(e.db)
	other, _ := e.open()
	err := e.plug.Session(context.Background(), e.db, func(tx *gorm.DB) error {
		if got := e.readOther(tx); !e.isReplica(got.Port) {
			t.Fatalf("untouched read in the session: %+v", got)
		}
		if err := setName(other, 1); err != nil {
			return err
		}
		got := e.readItem(tx, 1)
		if got.Name != "new" {
			t.Fatalf("STALE READ in a session: %+v", got)
		}
		e.mustPrimary(got, "session read of a written table")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSessionBeginPolicy: BEGIN READ ONLY stays on the replica (and its
// COMMIT too); a plain BEGIN moves the session to the primary at once.
func TestSessionBeginPolicy(t *testing.T) {
	e := newEnv(t)
	e.resumeAll()
	e.waitReplicaServes(e.db) // the session starts on a replica only once the poller has seen one
	err := e.plug.Session(context.Background(), e.db, func(tx *gorm.DB) error {
		if err := tx.Exec("BEGIN READ ONLY").Error; err != nil {
			return err
		}
		if p := port(t, tx); !e.isReplica(p) {
			t.Fatalf("read-only transaction left the replica: %d", p)
		}
		if err := tx.Exec("COMMIT").Error; err != nil {
			return err
		}
		if p := port(t, tx); !e.isReplica(p) {
			t.Fatalf("COMMIT of a read-only transaction moved the session: %d", p)
		}
		if err := tx.Exec("BEGIN").Error; err != nil {
			return err
		}
		if p := port(t, tx); p != e.pg.PrimaryPort() {
			t.Fatalf("BEGIN did not move the session to the primary: %d", p)
		}
		if err := tx.Exec("UPDATE others SET note = 'in-tx' WHERE id = 1").Error; err != nil {
			return err
		}
		return tx.Exec("COMMIT").Error
	})
	if err != nil {
		t.Fatal(err)
	}
	e.pauseAll()
	if got := e.readOther(e.db); got.Name != "in-tx" {
		t.Fatalf("STALE READ after a session transaction: %+v", got)
	}
}
