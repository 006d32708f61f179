package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/registry"
	"github.com/freshread/freshread/tracker"
)

// TestTrackerAnnounceEndToEnd: a plugin with Announce registers its
// database (without credentials); a tracker reading only the registry
// finds it and publishes the trigger graph; the running plugin picks the
// graph up by itself, and a trigger-written table is then read fresh.
func TestTrackerAnnounceEndToEnd(t *testing.T) {
	for _, d := range testcluster.RedisDeployments() {
		t.Run(d.Name, func(t *testing.T) { checkAnnounceEndToEnd(t, d.Client(t)) })
	}
}

// checkAnnounceEndToEnd runs TestTrackerAnnounceEndToEnd with the store,
// the registry and the tracker on rdb; the tracker also publishes the
// replicas' replay positions there.
func checkAnnounceEndToEnd(t *testing.T, rdb redis.UniversalClient) {
	storeName := "announce-" + t.Name()
	store := lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: storeName, Timeout: time.Second})
	e := newEnv(t)
	e.exec(`
CREATE TABLE ta (id int PRIMARY KEY, v text);
CREATE TABLE tb (id serial PRIMARY KEY, a_id int, op text);
CREATE FUNCTION ta_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO tb(a_id, op) VALUES (NEW.id, TG_OP); RETURN NEW; END $$;
CREATE TRIGGER ta_audit AFTER INSERT ON ta FOR EACH ROW EXECUTE FUNCTION ta_audit();`)
	db, _ := e.open(withStore(store), withConfig(func(c *plugin.Config) { c.Announce = true }))

	entries, _, err := registry.Entries(context.Background(), store.Client(), store.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	var found *registry.Entry
	for i := range entries {
		if entries[i].Database == e.dbName {
			found = &entries[i]
		}
	}
	if found == nil || found.StoreName() != storeName || len(found.Replicas) != e.pg.Replicas() {
		t.Fatalf("registry entry for %s: %+v (all: %+v)", e.dbName, found, entries)
	}
	if strings.Contains(found.Host, "@") || found.Port != e.pg.PrimaryPort() {
		t.Fatalf("registry entry address: %+v", found)
	}

	startTracker(e, storeName, tracker.ModeNone, func(c *tracker.Config) {
		c.Redis = rdb
		c.Databases = nil
		c.NoRegistry = false
		c.RegistryInterval = 100 * time.Millisecond
	})
	waitGraph(t, store, "ta")
	if rp, err := store.ReplayPositions(context.Background()); err != nil || len(rp) != e.pg.Replicas() {
		t.Fatalf("replay positions in the store: %v (err %v), want %d replicas", rp, err, e.pg.Replicas())
	}
	time.Sleep(1200 * time.Millisecond) // the plugin checks the graph's version every second
	e.resumeAll()
	e.pauseAll()
	if err := db.Exec("INSERT INTO ta VALUES (1, 'x')").Error; err != nil {
		t.Fatal(err)
	}
	got := e.readCol(db, "tb", "coalesce(max(op), 'none')", "a_id = ?", 1)
	if got.Name != "INSERT" {
		t.Fatalf("STALE READ of the trigger-written table: %+v", got)
	}
	e.mustPrimary(got, "read of tb after a write to ta")
}
