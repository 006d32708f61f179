package integration_test

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// TestSharedPollerFresh: three processes share one Redis store and so one
// poller. Exactly one holds the poller's lease; the others route by its
// snapshot. With every replica paused, a write by a follower is read fresh
// by the other follower and by the holder. Then the holder is cut off from
// Redis without a word (its connection drops every byte): its snapshot
// expires, a follower takes the lease over, and with replay paused again a
// new write is still read fresh by the others; once replay resumes, they
// read the new row from a replica, which only a live poller can have told
// them.
func TestSharedPollerFresh(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) { sharedPollerFresh(t, engine) })
	}
}

func sharedPollerFresh(t *testing.T, engine string) {
	_, r := newRedisStore(t, "shared-"+t.Name())
	// The writer lease and the publication's timeout are the defaults: a
	// write refused at the lease's fence (ErrStoreUnreachable, nothing
	// committed) is a store that did not answer in time, which a loaded
	// machine can make happen and this test does not test (writeFenced).
	shared := withConfig(func(c *plugin.Config) { c.PollerLease = time.Second })
	// Each process reaches Redis through a relay of its own.
	var relays []*testcluster.Relay
	storeVia := func() envOpt {
		store, relay := storeThroughRelay(t, r, "shared-"+t.Name())
		relays = append(relays, relay)
		return withStore(store)
	}
	e := newEngineEnv(t, engine, storeVia(), shared)
	dbs := []*gorm.DB{e.db, nil, nil}
	plugs := []*plugin.Plugin{e.plug, nil, nil}
	for i := 1; i < 3; i++ {
		dbs[i], plugs[i] = e.open(storeVia(), shared)
	}
	h := oneLeader(t, plugs)
	f1, f2 := (h+1)%3, (h+2)%3

	seedItem(t, e, dbs[f2], 1)
	e.pauseAll()
	if err := writeFenced(t, dbs[f1], 1); err != nil {
		t.Fatalf("a follower's write: %v", err)
	}
	for name, i := range map[string]int{"the other follower": f2, "the holder": h} {
		if got := e.readItem(dbs[i], 1); got.Name != "new" {
			t.Fatalf("%s read %+v after a follower's write with replay paused: stale", name, got)
		}
	}
	e.resumeAll()
	e.eventuallyReplica(func() served { return e.readItem(dbs[f2], 1) }, "the other follower's read once replay resumed")

	// The holder is cut off: its snapshot expires and a follower leads.
	relays[h].Partition(true)
	rest := []*plugin.Plugin{plugs[f1], plugs[f2]}
	deadline := time.Now().Add(15 * time.Second)
	for leaders(t, rest...) == "" {
		if time.Now().After(deadline) {
			t.Fatal("no follower took the poller's lease over within 15 s of the holder's cut")
		}
		time.Sleep(20 * time.Millisecond)
	}
	seedItem(t, e, dbs[f2], 2)
	e.pauseAll()
	if err := writeFenced(t, dbs[f2], 2); err != nil {
		t.Fatalf("a write after the cut: %v", err)
	}
	for _, i := range []int{f1, f2} {
		if got := e.readItem(dbs[i], 2); got.Name != "new" {
			t.Fatalf("process %d read %+v after a write with replay paused, the holder cut off: stale", i, got)
		}
	}
	e.resumeAll()
	got := e.eventuallyReplica(func() served { return e.readItem(dbs[f1], 2) }, "a read once replay resumed, under the new holder")
	if got.Name != "new" {
		t.Fatalf("read %+v from a replica under the new holder: stale", got)
	}
	relays[h].Partition(false)
}

// writeFenced is setName, tried again (three tries in all) while the
// plugin refuses it at its writer lease's fence: such a write committed
// nothing (the writer-cut tests check that), and a retry is what the
// error tells a user to do.
func writeFenced(t *testing.T, db *gorm.DB, id uint) error {
	t.Helper()
	var err error
	for try := 1; try <= 3; try++ {
		if err = setName(db, id); !plugin.IsStoreUnreachable(err) {
			return err
		}
		t.Logf("write of item %d refused at the lease's fence (try %d): %v", id, try, err)
		time.Sleep(500 * time.Millisecond)
	}
	return err
}

// oneLeader waits up to 15 s until exactly one of plugs holds the poller's
// lease, and returns its index.
func oneLeader(t *testing.T, plugs []*plugin.Plugin) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		l := leaders(t, plugs...)
		if len(l) == 1 {
			return int(l[0] - 'A')
		}
		if time.Now().After(deadline) {
			t.Fatalf("leases held: %q, want exactly one", l)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPollerRests: a process with no reads or writes for IdleAfter rests
// (no polls, no leases), and its next read is still fresh: another
// process writes with replay paused while it rests, and its read returns
// the new row. Its own write while resting wakes it and is read fresh by
// the other process.
func TestPollerRests(t *testing.T) {
	store, _ := newRedisStore(t, "rest-"+t.Name())
	resting := withConfig(func(c *plugin.Config) { c.IdleAfter = 200 * time.Millisecond })
	e := newEnv(t, withStore(store), resting)
	a, pa := e.db, e.plug
	b, _ := e.open(withStore(store), withConfig(func(c *plugin.Config) { c.IdleAfter = -1 }))
	seedItem(t, e, a, 1)
	seedItem(t, e, a, 2)
	waitGauge(t, pa, "freshread_poller_resting", 1)
	if n := gaugeOf(t, pa, "freshread_poller_rests_total"); n < 1 {
		t.Fatalf("freshread_poller_rests_total is %v while the poller rests, want at least 1", n)
	}

	e.pauseAll()
	if err := setName(b, 1); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if got := e.readItem(a, 1); got.Name != "new" {
		t.Fatalf("A, resting, read %+v after B's write with replay paused: stale", got)
	}
	e.resumeAll()
	e.eventuallyReplica(func() served { return e.readItem(a, 1) }, "A's read once replay resumed")

	waitGauge(t, pa, "freshread_poller_resting", 1)
	e.pauseAll()
	if err := setName(a, 2); err != nil {
		t.Fatalf("A's write while resting: %v", err)
	}
	if got := e.readItem(b, 2); got.Name != "new" {
		t.Fatalf("B read %+v after resting A's write with replay paused: stale", got)
	}
	e.resumeAll()
}

// leaders names, as letters in order (A, B, C…), the plugins whose
// freshread_poller_leading gauge is 1.
func leaders(t *testing.T, plugs ...*plugin.Plugin) string {
	t.Helper()
	s := ""
	for i, p := range plugs {
		if gaugeOf(t, p, "freshread_poller_leading") == 1 {
			s += string(rune('A' + i))
		}
	}
	return s
}

// waitGauge waits up to 10 s for p's gauge name to be want.
func waitGauge(t *testing.T, p *plugin.Plugin, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for gaugeOf(t, p, name) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v after 10 s, want %v", name, gaugeOf(t, p, name), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gaugeOf reads p's gauge or counter name, one without labels (0 when
// absent).
func gaugeOf(t *testing.T, p *plugin.Plugin, name string) float64 {
	t.Helper()
	return pluginMetrics(t, p)[name]
}

// storeThroughRelay is a Redis store of database on r reached through a
// relay the test can cut, with short timeouts.
func storeThroughRelay(t *testing.T, r *testcluster.Redis, database string) (*lsnstore.Redis, *testcluster.Relay) {
	t.Helper()
	relay, err := testcluster.NewRelay(r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(relay.Port()))}, ContextTimeoutEnabled: true,
		DialTimeout: 200 * time.Millisecond, MaxRetries: 1,
	})
	t.Cleanup(func() { rdb.Close() })
	return lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: database}), relay
}
