package integration_test

import (
	"fmt"
	"testing"

	"gorm.io/gorm"
)

// sequenceSQL is how an engine makes, writes and reads a sequence.
type sequenceSQL struct {
	// set has a %d for the value; read gives its value as v and the
	// server's port as port.
	create, set, next, read string
}

// TestSequenceReadNeverStale: a sequence is a relation its functions
// write. With every replica paused, setval and nextval through the plugin
// (raw SQL, as a service calls them) make a read of the sequence by the
// writer and by another process sharing the store return the primary's
// value, while the paused replica still holds the old one. (After
// nextval, a PostgreSQL replica that replayed it shows the value logged
// ahead, up to 32 more: replicas are only compared while paused.)
func TestSequenceReadNeverStale(t *testing.T) {
	checkSequenceReads(t, newEnv, sequenceSQL{
		create: "CREATE SEQUENCE s",
		set:    "SELECT setval('s', %d)",
		next:   "SELECT nextval('s')",
		read:   "SELECT last_value AS v, inet_server_port() AS port FROM s",
	})
}

// TestMariaDBSequenceReadNeverStale is the same with MariaDB's sequences
// (SETVAL and NEXTVAL write every table).
func TestMariaDBSequenceReadNeverStale(t *testing.T) {
	checkSequenceReads(t, newMariaEnv, sequenceSQL{
		create: "CREATE SEQUENCE s",
		set:    "SELECT SETVAL(s, %d)", // a literal: MariaDB's SETVAL takes no parameter
		next:   "SELECT NEXTVAL(s)",
		read:   "SELECT next_not_cached_value AS v, @@port AS port FROM s",
	})
}

// checkSequenceReads writes the sequence with the replicas paused and
// checks every read through the plugin against the primary's value, and
// the paused replica's against the old one.
func checkSequenceReads(t *testing.T, newEnv func(*testing.T, ...envOpt) *env, q sequenceSQL) {
	store, _ := newRedisStore(t, "seq-"+t.Name())
	e := newEnv(t, withStore(store))
	b, _ := e.open(withStore(store))
	if err := e.db.Exec(q.create).Error; err != nil {
		t.Fatal(err)
	}
	if err := e.db.Exec(fmt.Sprintf(q.set, 10)).Error; err != nil {
		t.Fatal(err)
	}
	read := func(db *gorm.DB) served {
		var got struct {
			V    int
			Port int
		}
		if err := db.Raw(q.read).Scan(&got).Error; err != nil {
			t.Fatal(err)
		}
		return served{Version: got.V, Port: got.Port}
	}
	open := func(d gorm.Dialector) *gorm.DB {
		db, err := gorm.Open(d, quiet())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeDB(db) })
		return db
	}
	primary, replica := open(e.c.primary(e.dbName)), open(e.c.replica(0, e.dbName))
	e.resumeAll()
	before := read(primary).Version
	if got := e.eventuallyReplica(func() served { return read(b) }, "the sequence before the writes"); got.Version != before {
		t.Fatalf("a replica's value %d before the writes, the primary's %d", got.Version, before)
	}
	e.pauseAll()
	for _, w := range []string{fmt.Sprintf(q.set, 500), q.next} {
		if err := e.db.Exec(w).Error; err != nil {
			t.Fatal(err)
		}
		want := read(primary).Version
		if got := read(replica).Version; got != before {
			t.Fatalf("the paused replica's value is %d after %s, want %d (the test proves nothing)", got, w, before)
		}
		for name, db := range map[string]*gorm.DB{"the writer": e.db, "another process": b} {
			if got := read(db); got.Version != want {
				t.Fatalf("%s read %d (port %d) after %s with replay paused, the primary has %d: STALE READ", name, got.Version, got.Port, w, want)
			}
		}
	}
}
