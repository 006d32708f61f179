package integration_test

import (
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/plugin"
)

// TestTakeoverKeepsPausedReplicasUsable: two processes share a Redis
// store, so one polls for both. With replay paused and the primary moved
// on (a write), the holder closes and the follower takes the poller's
// lease over. A read of an untouched table by the new holder is still
// served by a replica: the replicas are behind the primary but well
// within MaxLag. Before the follower kept the primary's history from the
// snapshots it followed, the new holder, younger than MaxLag, took its
// own first poll's position as the MaxLag threshold and every paused
// replica as outside it: reads went to the primary as no-replica until
// replay resumed, or for a minute. Both engines.
func TestTakeoverKeepsPausedReplicasUsable(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) { takeoverKeepsPausedReplicasUsable(t, engine) })
	}
}

func takeoverKeepsPausedReplicasUsable(t *testing.T, engine string) {
	store, _ := newRedisStore(t, "takeover-"+t.Name())
	e := newEngineEnv(t, engine, withStore(store))
	seedItem(t, e, e.db, 1)
	// The env's own process closes: only the two below may hold the
	// lease. The first takes it; the second, opened once it has, follows
	// from its first poll on, and so has no history of its own.
	if err := e.plug.Close(); err != nil {
		t.Fatal(err)
	}
	open := func() (*gorm.DB, *plugin.Plugin) {
		return e.open(withStore(store), withConfig(func(c *plugin.Config) { c.IdleAfter = -1 }))
	}
	holderDB, holder := open()
	if oneLeader(t, []*plugin.Plugin{holder}) != 0 {
		t.Fatal("the first process did not take the lease")
	}
	followerDB, follower := open()
	if l := leaders(t, holder, follower); len(l) != 1 || l[0] != 'A' {
		t.Fatalf("leases held: %q, want the first process's alone", l)
	}
	e.eventuallyReplica(func() served { return e.readOther(followerDB) }, "the follower's read before the takeover")

	e.pauseAll()
	if err := setName(holderDB, 1); err != nil { // the primary moves on
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the follower follows the holder's snapshots
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	closeDB(holderDB)
	if oneLeader(t, []*plugin.Plugin{follower}) != 0 {
		t.Fatal("the follower did not take the lease over")
	}
	time.Sleep(100 * time.Millisecond) // polls of its own
	got := e.readOther(followerDB)
	if got.Name != "untouched" {
		t.Fatalf("the new holder read %+v, want \"untouched\"", got)
	}
	e.mustReplica(got, "the new holder's read of an untouched table, replicas paused but within MaxLag")
}
