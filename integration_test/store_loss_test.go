package integration_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/freshreadprom"
	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// storeLoss makes the position store lose what it holds.
type storeLoss struct {
	name string
	lose func(t *testing.T, r *testcluster.Redis, rdb *redis.Client)
	// afterPoll: the loss is only visible to the poller (eviction on a
	// server whose policy was noeviction when the plugins last read it):
	// the read waits for one poll before it must be fresh.
	afterPoll bool
	// setup, when set, prepares the Redis before the processes start.
	setup func(t *testing.T, rdb *redis.Client)
	// pollOnce: the processes poll once, at start, and never again, so
	// the loss must be noticed by the reads themselves (and the reads
	// never go back to the replicas).
	pollOnce bool
}

var storeLosses = []storeLoss{
	{name: "Flushall", lose: func(t *testing.T, _ *testcluster.Redis, rdb *redis.Client) {
		if err := rdb.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}},
	{name: "RestartEmpty", lose: func(t *testing.T, r *testcluster.Redis, _ *redis.Client) {
		ctx := context.Background()
		if err := r.Stop(ctx); err != nil {
			t.Fatalf("stop Redis: %v", err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}},
	{name: "Eviction", afterPoll: true, lose: evictEverything},
	// The server evicts by configuration: the plugins read the policy at
	// start and guard every read, so a read after the eviction is fresh
	// although no poll comes to notice it.
	{name: "EvictionUnderPolicy", setup: evictingPolicy, lose: evictEverything, pollOnce: true},
}

// restoreMemoryConfig puts the server's maxmemory settings back when t
// ends.
func restoreMemoryConfig(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	old, err := rdb.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rdb.ConfigSet(ctx, "maxmemory", old["maxmemory"])
		rdb.ConfigSet(ctx, "maxmemory-policy", old["maxmemory-policy"])
	})
}

// evictingPolicy configures the server to evict (maxmemory far above what
// it uses, volatile-random) until the test ends.
func evictingPolicy(t *testing.T, rdb *redis.Client) {
	ctx := context.Background()
	restoreMemoryConfig(t, rdb)
	rdb.ConfigSet(ctx, "maxmemory-policy", "volatile-random")
	rdb.ConfigSet(ctx, "maxmemory", "1gb")
}

// evictEverything sets a small maxmemory with a volatile policy and writes
// keys with a TTL until the server has evicted every key with a TTL it
// held before (the position keys), then puts the memory settings back, as
// an operator would.
func evictEverything(t *testing.T, _ *testcluster.Redis, rdb *redis.Client) {
	ctx := context.Background()
	old, err := rdb.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		rdb.ConfigSet(ctx, "maxmemory", old["maxmemory"])
		rdb.ConfigSet(ctx, "maxmemory-policy", old["maxmemory-policy"])
		rdb.Do(ctx, "EVAL", "for _, k in ipairs(redis.call('KEYS', 'evict-junk-*')) do redis.call('DEL', k) end", "0")
	}()
	var before []string
	for _, k := range rdb.Keys(ctx, "*write_lsn*").Val() {
		if rdb.TTL(ctx, k).Val() > 0 {
			before = append(before, k)
		}
	}
	if len(before) == 0 {
		t.Fatal("no position key to evict")
	}
	info := rdb.Info(ctx, "memory").Val()
	var used int64
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			used, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	rdb.ConfigSet(ctx, "maxmemory-policy", "volatile-random")
	rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+(1<<20), 10))
	val := strings.Repeat("x", 4096)
	for i := 0; rdb.Exists(ctx, before...).Val() > 0; i++ {
		if i > 200000 {
			t.Fatal("the position keys were not evicted")
		}
		rdb.Set(ctx, "evict-junk-"+strconv.Itoa(i), val, time.Hour)
	}
}

// checkStoreLoss: two processes share a Redis store; with the replicas
// paused, A updates a row and B reads it fresh. The store then loses its
// data. B's next read, and the first read of a process started after the
// loss, must still be fresh; once the replicas catch up, reads go back to
// them.
func checkStoreLoss(t *testing.T, newEnv func(*testing.T, ...envOpt) *env, loss storeLoss) {
	store, r := newRedisStore(t, "loss-"+t.Name())
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rdb.Close()
	if loss.setup != nil {
		loss.setup(t, rdb)
	}
	opts := []envOpt{withStore(store)}
	if loss.pollOnce {
		opts = append(opts, withConfig(func(c *plugin.Config) { c.PollInterval = time.Hour }))
	}
	e := newEnv(t, opts...)
	b, _ := e.open(opts...)
	e.staleOnReplicas()
	if got := e.readItem(b, 1); got.Name != "new" {
		t.Fatalf("before the loss: STALE READ %+v", got)
	}
	loss.lose(t, r, rdb)
	if loss.afterPoll {
		time.Sleep(100 * time.Millisecond) // 20 polls
	}
	for i := range 3 {
		if got := e.readItem(b, 1); got.Name != "new" {
			t.Fatalf("read %d after the store lost its data: STALE READ %+v", i, got)
		}
	}
	c, _ := e.open(opts...)
	if got := e.readItem(c, 1); got.Name != "new" {
		t.Fatalf("process started after the loss: STALE READ %+v", got)
	}
	if loss.pollOnce {
		return
	}
	e.resumeAll()
	time.Sleep(100 * time.Millisecond)
	e.mustReplica(e.readItem(b, 1), "after catch-up, the process that saw the loss")
	e.mustReplica(e.readItem(c, 1), "after catch-up, the process started after the loss")
}

// TestEvictionPolicyMetric: a plugin whose store's Redis may evict keys
// says so (freshread_store_eviction_possible, and a warning).
func TestEvictionPolicyMetric(t *testing.T) {
	store, r := newRedisStore(t, "policy-"+t.Name())
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	restoreMemoryConfig(t, rdb)
	e := newEnv(t, withStore(store))
	if v := pluginMetric(t, e.plug, "freshread_store_eviction_possible"); v != 0 {
		t.Fatalf("freshread_store_eviction_possible = %v with noeviction, want 0", v)
	}
	rdb.ConfigSet(ctx, "maxmemory-policy", "volatile-lru")
	rdb.ConfigSet(ctx, "maxmemory", "1gb")
	_, p := e.open(withStore(store))
	if v := pluginMetric(t, p, "freshread_store_eviction_possible"); v != 1 {
		t.Fatalf("freshread_store_eviction_possible = %v with volatile-lru and maxmemory, want 1", v)
	}
}

// pluginMetric returns the value of the plugin's unlabelled metric name
// (-1 when absent).
func pluginMetric(t *testing.T, p *plugin.Plugin, name string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(freshreadprom.Plugin(p))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			m := mf.GetMetric()[0]
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

func TestStoreLossNeverReadsStale(t *testing.T) {
	for _, l := range storeLosses {
		t.Run(l.name, func(t *testing.T) { checkStoreLoss(t, newEnv, l) })
	}
}

func TestMariaDBStoreLossNeverReadsStale(t *testing.T) {
	for _, l := range storeLosses {
		t.Run(l.name, func(t *testing.T) { checkStoreLoss(t, newMariaEnv, l) })
	}
}

// checkSentinelFailover: the store lives on a Redis master watched by
// three sentinels; its replica's replication is stalled, so the raise of
// A's update reaches the master only. The master is killed and the
// sentinels promote the replica, which lacks the raise. B (a process that
// read through the failover) and C (started after it) must still read
// the update fresh, while the database replicas are paused. fault
// fails the master over (nil: kill it).
func checkSentinelFailover(t *testing.T, newEnv func(*testing.T, ...envOpt) *env, fault func(*testcluster.RedisSentinel, context.Context) (string, error)) {
	if fault == nil {
		fault = (*testcluster.RedisSentinel).KillMaster
	}
	s := testcluster.RedisSentinelFor(t)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testcluster.SentinelMaster,
		SentinelAddrs: s.SentinelAddrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	store := lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: "sentinel-" + t.Name()})
	// A failover takes seconds: a MaxLag longer than the whole test keeps
	// the paused replicas usable, so only the store's positions protect
	// the read.
	longLag := withConfig(func(c *plugin.Config) { c.MaxLag = 2 * time.Minute })
	e := newEnv(t, withStore(store), longLag)
	b, _ := e.open(withStore(store), longLag)
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.pauseAll()
	ctx := e.ctx()
	if err := rdb.Do(ctx, "WAIT", 1, 5000).Err(); err != nil { // the anchor is on the replica
		t.Fatal(err)
	}
	s.StallReplication(true)
	if err := setName(e.db, 1); err != nil {
		t.Fatal(err)
	}
	if got := e.readItem(b, 1); got.Name != "new" {
		t.Fatalf("before the failover: STALE READ %+v", got)
	}
	done := make(chan error, 1)
	go func() { _, err := fault(s, ctx); done <- err }()
	// Read through the failover: every read that returns must be fresh.
	reads := 0
	for waiting := true; waiting; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			waiting = false
		default:
		}
		if got := e.readItem(b, 1); got.Name != "new" {
			t.Fatalf("read %d during the failover: STALE READ %+v", reads, got)
		}
		reads++
		time.Sleep(5 * time.Millisecond)
	}
	// Read on for longer than the circuit breaker's longest backoff (5 s,
	// opened by the failures during the failover): these reads consult the
	// new master's store.
	for i, end := 0, time.Now().Add(6*time.Second); time.Now().Before(end); i++ {
		if got := e.readItem(b, 1); got.Name != "new" {
			t.Fatalf("read %d after the failover: STALE READ %+v", i, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c, _ := e.open(withStore(store), longLag)
	if got := e.readItem(c, 1); got.Name != "new" {
		t.Fatalf("process started after the failover: STALE READ %+v", got)
	}
	t.Logf("%d reads during the failover, all fresh", reads)
	e.resumeAll()
	start := time.Now()
	for !e.isReplica(e.readItem(b, 1).Port) {
		if time.Since(start) > 3*time.Second {
			e.mu.Lock()
			t.Logf("DEBUG last decision %+v", e.decisions[len(e.decisions)-1])
			e.mu.Unlock()
			t.Fatal("reads not back on the replicas 3 s after they caught up")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("reads back on the replicas %v after they caught up", time.Since(start).Round(time.Millisecond))
}

func TestSentinelFailoverNeverReadsStale(t *testing.T) {
	checkSentinelFailover(t, newEnv, nil)
}

// TestSentinelCoordinatedFailoverNeverReadsStale is the same through a
// failover asked of a sentinel (SENTINEL FAILOVER) instead of a crash:
// the promoted replica lacks the raise, and the old master, now its
// replica, loses it too.
func TestSentinelCoordinatedFailoverNeverReadsStale(t *testing.T) {
	checkSentinelFailover(t, newEnv, (*testcluster.RedisSentinel).Failover)
}

func TestMariaDBSentinelFailoverNeverReadsStale(t *testing.T) {
	checkSentinelFailover(t, newMariaEnv, nil)
}
