package integration_test

import (
	"net/url"
	"testing"
	"time"

	"gorm.io/driver/postgres"

	"github.com/freshread/freshread/plugin"
)

// TestUnknownCommitPositionNeverReadsStale: two processes share a Redis
// store. A's commit succeeds but the position after it cannot be read, as
// when the primary goes down right after COMMIT (here A's role may not run
// pg_current_wal_insert_lsn, which fails the same step every time). A
// keeps the write pending and reads from the primary; B, which cannot
// know of a write that never reached the store, must not read it stale
// from a replica that has not replayed it. Once the replicas catch up and
// A can publish again, B reads from the replicas again.
func TestUnknownCommitPositionNeverReadsStale(t *testing.T) {
	store, _ := newRedisStore(t, "unknown-"+t.Name())
	e := newEnv(t, withStore(store))
	b, _ := e.open(withStore(store))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.mustReplica(e.readItem(b, 1), "before the write")

	// A connects as a role that may write the tables but not read the
	// primary's WAL position.
	role := "fr_no_position"
	for _, q := range []string{
		`DO $$BEGIN CREATE ROLE ` + role + ` LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END$$`,
		`GRANT ALL ON ALL TABLES IN SCHEMA public TO ` + role,
		`GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO ` + role,
	} {
		if err := e.db.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	dsn, err := url.Parse(e.pg.PrimaryDSN(e.dbName))
	if err != nil {
		t.Fatal(err)
	}
	dsn.User = url.User(role)
	// Refused at db.Use, the function is an error (ErrPrivilege); refused
	// after it, every commit's position is unknown.
	a, pa := e.open(withStore(store), withPrimary(postgres.Open(dsn.String())))
	if err := e.db.Exec(`REVOKE EXECUTE ON FUNCTION pg_current_wal_insert_lsn() FROM PUBLIC`).Error; err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp()
	e.pauseAll()
	if err := setName(a, 1); err != nil {
		t.Fatalf("A's write: %v", err)
	}
	for i := range 3 {
		if got := e.readItem(b, 1); got.Name != "new" {
			t.Fatalf("B's read %d after A's write whose position is unknown: STALE READ %+v", i, got)
		}
	}
	if got := e.readItem(a, 1); got.Name != "new" {
		t.Fatalf("A's own read: STALE READ %+v", got)
	}
	c, _ := e.open(withStore(store))
	if got := e.readItem(c, 1); got.Name != "new" {
		t.Fatalf("a process started after the write: STALE READ %+v", got)
	}
	// A can read positions again: it publishes the write; the replicas
	// catch up; B goes back to them.
	if err := e.db.Exec(`GRANT EXECUTE ON FUNCTION pg_current_wal_insert_lsn() TO PUBLIC`).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	waitNoPending(t, pa)
	e.mustReplica(e.readItem(b, 1), "B after the replicas caught up")
	if got := e.readItem(b, 1); got.Name != "new" {
		t.Fatalf("B after the catch-up: STALE READ %+v", got)
	}
}

// waitNoPending waits until p reports no pending write.
func waitNoPending(t *testing.T, p *plugin.Plugin) {
	t.Helper()
	for i := 0; pluginMetric(t, p, "freshread_unpublished_writes") != 0; i++ {
		if i > 1000 {
			t.Fatal("the pending write was never published")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
