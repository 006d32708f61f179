package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// TestReplayFromStore: with ReplayFromStore the replicas' positions come
// from the store (where the tracker publishes them): old positions there
// send the read to the primary even though the replicas caught up; once
// the keys are gone (a dead tracker's expire), the plugin polls the
// replicas itself and uses them again.
func TestReplayFromStore(t *testing.T) {
	database := "replay-" + t.Name()
	store, _ := newRedisStore(t, database)
	e := newEnv(t, withStore(store), withConfig(func(c *plugin.Config) { c.ReplayFromStore = true }))
	if err := e.db.Create(&Item{ID: 1, Name: "x"}).Error; err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	old := map[string]lsnstore.Position{}
	for i := 0; i < e.pg.Replicas(); i++ {
		old[replicaName(i)] = lsnstore.PositionOf(1)
	}
	if err := store.PublishReplay(ctx, old); err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp()
	time.Sleep(50 * time.Millisecond)
	got := e.readItem(e.db, 1)
	if got.Name != "x" {
		t.Fatalf("read: %+v", got)
	}
	e.mustPrimary(got, "replicas reported behind by the store")

	if err := store.Client().Del(ctx, "freshread:{"+database+"}-replicas").Err(); err != nil {
		t.Fatal(err)
	}
	// The plugin polls the replicas directly once the store has no
	// positions: reads go back to a replica (within a bound, not a fixed
	// sleep: under load the poller and the store's verification take
	// their time) and still see the row.
	got = e.eventuallyReplica(func() served { return e.readItem(e.db, 1) }, "after the store's positions expired (polled directly)")
	if got.Name != "x" {
		t.Fatalf("read from a replica: %+v", got)
	}
}
