package integration_test

import (
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// TestSequenceReadNeverStale: a sequence is a relation its functions
// write. With every replica paused, setval and nextval through the plugin
// (raw SQL, as a service calls them) make a read of the sequence
// (SELECT last_value FROM s) by the writer and by another process sharing
// the store return the primary's value, never the paused replicas' older
// one. (After nextval, a replica that replayed it shows the value
// PostgreSQL logged ahead, up to 32 more: a replica's last_value is never
// the primary's then, so only the reads before replay resumes are
// compared.)
func TestSequenceReadNeverStale(t *testing.T) {
	store, _ := newRedisStore(t, "seq-"+t.Name())
	e := newEnv(t, withStore(store))
	b, _ := e.open(withStore(store))
	for _, q := range []string{"CREATE SEQUENCE s", "SELECT setval('s', 10)"} {
		if err := e.db.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	read := func(db *gorm.DB) served {
		var got struct {
			V    int
			Port int
		}
		if err := db.Raw("SELECT last_value AS v, inet_server_port() AS port FROM s").Scan(&got).Error; err != nil {
			t.Fatal(err)
		}
		return served{Version: got.V, Port: got.Port}
	}
	e.resumeAll()
	if got := e.eventuallyReplica(func() served { return read(b) }, "the sequence before the writes"); got.Version != 10 {
		t.Fatalf("a replica's last_value %d before the writes, want 10", got.Version)
	}
	e.pauseAll()
	replica, err := gorm.Open(postgres.Open(e.pg.ReplicaDSN(0, e.dbName)), quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDB(replica) })
	for _, w := range []struct {
		sql  string
		want int
	}{{"SELECT setval('s', 500)", 500}, {"SELECT nextval('s')", 501}} {
		if err := e.db.Exec(w.sql).Error; err != nil {
			t.Fatal(err)
		}
		if got := read(replica); got.Version != 10 {
			t.Fatalf("the paused replica's last_value is %d after %s, want 10: the test proves nothing", got.Version, w.sql)
		}
		for name, db := range map[string]*gorm.DB{"the writer": e.db, "another process": b} {
			if got := read(db); got.Version != w.want {
				t.Fatalf("%s read last_value %d (port %d) after %s with replay paused, want %d: STALE READ", name, got.Version, got.Port, w.sql, w.want)
			}
		}
	}
}
