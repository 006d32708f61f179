package integration_test

import (
	"context"
	"testing"

	"gorm.io/gorm"

	"github.com/freshread/freshread/plugin"
)

// writePathsWithoutReturning are the write paths MariaDB and MySQL
// support: no UPDATE ... RETURNING, no RETURNING clause in GORM's mysql
// dialector.
func writePathsWithoutReturning() []writePath {
	var out []writePath
	for _, wp := range writePaths {
		switch wp.name {
		case "RawReturningScan", "ClauseReturning":
			continue
		}
		out = append(out, wp)
	}
	return out
}

// TestMariaDBWritePathsNeverReadStale: every write path, with the replica's
// SQL thread stopped: the next read of the written table is fresh and
// served by the primary, an untouched table by the replica, and after
// START SLAVE SQL_THREAD and catch-up the written table by the replica.
func TestMariaDBWritePathsNeverReadStale(t *testing.T) {
	for i, wp := range writePathsWithoutReturning() {
		t.Run(wp.name, func(t *testing.T) {
			e := newMariaEnv(t)
			runWritePath(t, e, wp, uint(i+1))
		})
	}
}

// TestMariaDBSessionReplay: a session starts on the MariaDB replica, keeps
// a user variable and a temporary table there, and at its first write
// replays both on the primary.
func TestMariaDBSessionReplay(t *testing.T) {
	e := newMariaEnv(t)
	e.resumeAll()
	err := e.plug.Session(context.Background(), e.db, func(tx *gorm.DB) error {
		var p int
		if err := tx.Raw("SELECT @@port").Scan(&p).Error; err != nil {
			return err
		}
		if !e.isReplica(p) {
			t.Fatalf("session did not start on the replica: %d", p)
		}
		if err := tx.Exec("SET @tag = 'from-session'").Error; err != nil {
			return err
		}
		if err := tx.Exec("CREATE TEMPORARY TABLE staging (id int, name varchar(50))").Error; err != nil {
			return err
		}
		if err := tx.Exec("INSERT INTO staging VALUES (41, @tag)").Error; err != nil {
			return err
		}
		if err := tx.Raw("SELECT @@port").Scan(&p).Error; err != nil {
			return err
		}
		if !e.isReplica(p) {
			t.Fatalf("session statements moved to %d before the first write", p)
		}
		return tx.Exec("INSERT INTO items (id, name) SELECT id, name FROM staging").Error
	})
	if err != nil {
		t.Fatal(err)
	}
	var name string
	if err := e.db.Clauses().Raw("SELECT name FROM items WHERE id = 41").Scan(&name).Error; err != nil || name != "from-session" {
		t.Fatalf("row written from the replayed temp table and variable: %q (err %v)", name, err)
	}
}

// TestMariaDBSessionConsistency: read-your-writes through a session on
// MariaDB with the replica stopped.
func TestMariaDBSessionConsistency(t *testing.T) {
	e := newMariaEnv(t, withConfig(func(c *plugin.Config) { c.Consistency = plugin.Session }))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.pauseAll()
	mine := plugin.WithSession(context.Background())
	if err := setName(e.db.WithContext(mine), 1); err != nil {
		t.Fatal(err)
	}
	if got := e.readItem(e.db.WithContext(mine), 1); got.Name != "new" {
		t.Fatalf("STALE READ of the session's own write: %+v", got)
	}
	e.mustReplica(e.readItem(e.db.WithContext(plugin.WithSession(context.Background())), 1), "another session")
}

// TestMariaDBCausalWait: with MaxWait, a read the replica has not applied
// yet waits on the replica (MASTER_GTID_WAIT) and is served there, fresh.
func TestMariaDBCausalWait(t *testing.T) {
	checkWaitedRead(t, newMariaEnv(t, withConfig(withMaxWait)))
}
