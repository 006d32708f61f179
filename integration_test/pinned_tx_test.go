package integration_test

import (
	"testing"

	"gorm.io/gorm"
)

// TestPinnedRawTransaction: on a connection pinned with db.Connection, a
// transaction run by raw SQL (Exec("BEGIN") ... Exec("COMMIT")) is
// published after its COMMIT, not when each of its writes returns (before
// the commit): with the writes replayed by every replica and replay paused
// before the COMMIT, another process sharing the store reads the
// committed rows. A ROLLBACK publishes nothing. Both engines.
func TestPinnedRawTransaction(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) {
			e := newEngineEnv(t, engine)
			other, _ := e.open()
			if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
				t.Fatal(err)
			}
			e.resumeAll()
			e.waitReplicaServes(other)
			before, err := e.store.WritePosition(e.ctx(), []string{"items"})
			if err != nil {
				t.Fatal(err)
			}
			err = e.db.Connection(func(conn *gorm.DB) error {
				conn = conn.Session(&gorm.Session{})
				if err := execEach(conn, "BEGIN", "UPDATE items SET name = 'new' WHERE id = 1"); err != nil {
					return err
				}
				var id int // a write through the Row chain
				if err := conn.Raw("INSERT INTO items (id, name, version) VALUES (2, 'new', 0) RETURNING id").Scan(&id).Error; err != nil {
					return err
				}
				if pos, err := e.store.WritePosition(e.ctx(), []string{"items"}); err != nil || !pos.Equal(before) {
					t.Errorf("items published at %v (err %v) inside the raw transaction; want it left at %v until the COMMIT", pos, err, before)
				}
				e.waitCaughtUp() // the replicas replay all but the commit
				e.pauseAll()
				return conn.Exec("COMMIT").Error
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []uint{1, 2} {
				got := e.readItem(other, id)
				if got.Name != "new" {
					t.Fatalf("STALE READ of item %d by another process after a raw transaction committed on a pinned connection: %+v", id, got)
				}
				e.mustPrimary(got, "a read of a committed row, replay paused")
			}

			e.resumeAll()
			committed, err := e.store.WritePosition(e.ctx(), []string{"items"})
			if err != nil {
				t.Fatal(err)
			}
			err = e.db.Connection(func(conn *gorm.DB) error {
				return execEach(conn.Session(&gorm.Session{}), "START TRANSACTION", "UPDATE items SET name = 'rolled back' WHERE id = 1", "ROLLBACK")
			})
			if err != nil {
				t.Fatal(err)
			}
			if pos, err := e.store.WritePosition(e.ctx(), []string{"items"}); err != nil || !pos.Equal(committed) {
				t.Fatalf("items published at %v (err %v) after a ROLLBACK; want %v", pos, err, committed)
			}
			e.mustReplica(e.readItem(other, 1), "a read after a rolled-back raw transaction")
		})
	}
}

// execEach runs each statement on db in turn, stopping at the first error.
func execEach(db *gorm.DB, statements ...string) error {
	for _, q := range statements {
		if err := db.Exec(q).Error; err != nil {
			return err
		}
	}
	return nil
}
