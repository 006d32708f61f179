package integration_test

import (
	"testing"
	"time"

	"gorm.io/gorm"
)

// checkForeignTxNeverReadStale: a write in a transaction begun on
// db.Connection's pinned connection, not through the plugin's pool, is held
// until the plugin sees the transaction end. The replicas replay
// everything the primary has before the commit (after several polls, where
// the plugin used to publish the write's position, too early), stop, and
// the transaction commits: the write is read fresh from the primary, by
// this process at once and by a second process sharing the store once it
// is published; after catch-up, from a replica.
func checkForeignTxNeverReadStale(t *testing.T, e *env) {
	t.Helper()
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	other, _ := e.open() // another process, sharing the store
	before, err := e.store.WritePosition(e.ctx(), []string{"items"})
	if err != nil {
		t.Fatal(err)
	}
	err = e.db.Connection(func(conn *gorm.DB) error {
		tx := conn.Begin()
		if tx.Error != nil {
			return tx.Error
		}
		if err := setName(tx, 1); err != nil {
			tx.Rollback()
			return err
		}
		time.Sleep(100 * time.Millisecond) // many polls (5 ms)
		if pos, err := e.store.WritePosition(e.ctx(), []string{"items"}); err != nil || !pos.Equal(before) {
			t.Errorf("items published at %v (err %v) before the commit; want it held at %v", pos, err, before)
		}
		e.waitCaughtUp()
		e.pauseAll()
		return tx.Commit().Error
	})
	if err != nil {
		t.Fatal(err)
	}
	got := e.readItem(e.db, 1)
	if got.Name != "new" {
		t.Fatalf("STALE READ after a transaction begun on db.Connection: %+v", got)
	}
	e.mustPrimary(got, "read right after the commit, replicas stopped")
	// The poller sees the end and publishes; until then another process
	// may read stale (docs/architecture.md).
	deadline := time.Now().Add(10 * time.Second)
	for {
		pos, err := e.store.WritePosition(e.ctx(), []string{"items"})
		if err == nil && !pos.Equal(before) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("items still at %v (err %v) 10 s after the commit", pos, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	got = e.readItem(other, 1)
	if got.Name != "new" {
		t.Fatalf("STALE READ in another process after a transaction begun on db.Connection: %+v", got)
	}
	e.mustPrimary(got, "another process's read, replicas stopped")
	e.mustReplica(e.readOther(e.db), "read of an untouched table once the write is published")
	e.resumeAll()
	e.mustReplica(e.readItem(e.db, 1), "read after catch-up")
}

func TestForeignTxNeverReadStale(t *testing.T) {
	checkForeignTxNeverReadStale(t, newEnv(t))
}

func TestMariaDBForeignTxNeverReadStale(t *testing.T) {
	checkForeignTxNeverReadStale(t, newMariaEnv(t))
}
