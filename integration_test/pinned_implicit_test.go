package integration_test

import (
	"fmt"
	"testing"

	"gorm.io/gorm"
)

// TestMariaDBPinnedImplicitCommits: on a connection pinned with
// db.Connection, MariaDB commits transactions that no COMMIT ends (after
// SET autocommit = 0; an implicit commit before BEGIN, DDL, LOCK TABLES,
// SET autocommit = 1). Each case writes item id on the pinned connection
// inside such a transaction, lets the replicas replay everything before
// the commit, pauses them, runs the statement that commits, and reads the
// item from another process sharing the store: it must be the committed
// row. Then, after the case's last statement, a plain write on the same
// connection (autocommit again) is read fresh too, so no transaction is
// taken to be open after it ended.
func TestMariaDBPinnedImplicitCommits(t *testing.T) {
	e := newMariaEnv(t)
	other, _ := e.open()
	if err := e.db.Exec("CREATE TABLE scratch (i INT)").Error; err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		open    []string // run before the write
		prepare []string // run after the write, before the replicas replay it
		commit  string   // the statement that commits the write
		after   []string // run after the read (to leave autocommit on, unlocked)
		trailer bool     // then a plain write must be read fresh
	}{
		{"SET autocommit = 0 then COMMIT", []string{"SET autocommit = 0"}, nil, "COMMIT", nil, false},
		{"the next transaction under autocommit = 0", nil, nil, "COMMIT", []string{"SET autocommit = 1"}, true},
		{"SET autocommit = 0 then SET autocommit = 1", []string{"SET @@session.autocommit = OFF"}, nil, "SET autocommit = 1", nil, true},
		{"BEGIN inside a transaction", []string{"BEGIN"}, nil, "BEGIN", []string{"COMMIT"}, true},
		{"DDL inside a transaction", []string{"START TRANSACTION"}, nil, "TRUNCATE TABLE scratch", nil, true},
		{"CREATE inside a transaction", []string{"BEGIN"}, nil, "CREATE TABLE made_in_tx (i INT)", nil, true},
		{"LOCK TABLES inside a transaction", []string{"BEGIN"}, nil, "LOCK TABLES scratch WRITE", []string{"UNLOCK TABLES"}, true},
		{"DDL under autocommit = 0", []string{"SET autocommit = 0"}, nil, "ALTER TABLE scratch ADD COLUMN j INT", []string{"SET autocommit = 1"}, true},
		{"XA COMMIT after XA PREPARE", []string{"XA START 'pinned-1'"}, []string{"XA END 'pinned-1'", "XA PREPARE 'pinned-1'"}, "XA COMMIT 'pinned-1'", nil, true},
		{"XA COMMIT ONE PHASE", []string{"XA BEGIN 'pinned-2'"}, []string{"XA END 'pinned-2'"}, "XA COMMIT 'pinned-2' ONE PHASE", nil, true},
	}
	for i := range cases {
		if err := e.db.Create(&Item{ID: uint(100 + i), Name: "old"}).Error; err != nil {
			t.Fatal(err)
		}
		if err := e.db.Create(&Item{ID: uint(200 + i), Name: "old"}).Error; err != nil {
			t.Fatal(err)
		}
	}
	e.resumeAll()
	err := e.db.Connection(func(conn *gorm.DB) error {
		conn = conn.Session(&gorm.Session{})
		for i, c := range cases {
			id := uint(100 + i)
			if err := execEach(conn, c.open...); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if err := conn.Exec("UPDATE items SET name = 'new' WHERE id = ?", id).Error; err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if err := execEach(conn, c.prepare...); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			e.resumeAll() // the replicas replay all but the commit
			e.pauseAll()
			if err := conn.Exec(c.commit).Error; err != nil {
				return fmt.Errorf("%s: %s: %w", c.name, c.commit, err)
			}
			if got := e.readItem(other, id); got.Name != "new" {
				t.Errorf("STALE READ, %s: item %d read by another process after %q: %+v", c.name, id, c.commit, got)
			}
			if err := execEach(conn, c.after...); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if c.trailer {
				e.resumeAll()
				e.pauseAll()
				plain := uint(200 + i)
				if err := conn.Exec("UPDATE items SET name = 'new' WHERE id = ?", plain).Error; err != nil {
					return fmt.Errorf("%s: %w", c.name, err)
				}
				if got := e.readItem(other, plain); got.Name != "new" {
					t.Errorf("STALE READ, %s: item %d written in autocommit after it, read by another process: %+v", c.name, plain, got)
				}
			}
			e.resumeAll()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
