package integration_test

import (
	"testing"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/internal/lib/leakcheck"
	"github.com/freshread/freshread/plugin"
)

// TestCloseLeavesNoGoroutines: Close stops the poller; closing the plugin
// and the *gorm.DB leaves no goroutine behind.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	testcluster.PostgresFor(t) // the shared servers' goroutines are not the plugin's
	baseline := leakcheck.Current()
	e := newEnv(t)
	if err := e.db.Create(&Item{ID: 1, Name: "x"}).Error; err != nil {
		t.Fatal(err)
	}
	e.readItem(e.db, 1)
	if err := e.plug.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.plug.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	closeDB(e.db)
	leakcheck.VerifyNone(t, baseline) // retries with backoff for about half a second
}

// TestDependentsRaised: with Config.Dependents {"items": {"others"}} (a
// trigger on items writes others), writing items makes reads of others go
// to the primary, and the trigger's write is never read stale.
func TestDependentsRaised(t *testing.T) {
	e := newEnv(t, withConfig(func(c *plugin.Config) {
		c.Dependents = map[string][]string{"items": {"others"}}
	}))
	if err := e.db.Exec(`CREATE FUNCTION touch_other() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN UPDATE others SET note = NEW.name WHERE id = 1; RETURN NEW; END $$`).Error; err != nil {
		t.Fatal(err)
	}
	if err := e.db.Exec(`CREATE TRIGGER items_touch AFTER INSERT OR UPDATE ON items FOR EACH ROW EXECUTE FUNCTION touch_other()`).Error; err != nil {
		t.Fatal(err)
	}
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	if got := e.readOther(e.db); got.Name != "old" || !e.isReplica(got.Port) {
		t.Fatalf("before: %+v", got)
	}
	e.pauseAll()
	if err := setName(e.db, 1); err != nil {
		t.Fatal(err)
	}
	got := e.readOther(e.db)
	if got.Name != "new" {
		t.Fatalf("STALE READ of the trigger-written table: %+v", got)
	}
	e.mustPrimary(got, "dependent table")
}
