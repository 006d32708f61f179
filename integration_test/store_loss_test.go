package integration_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/internal/testcluster"
	"github.com/freshread/freshread/plugin"
)

// storeLoss makes the position store lose what it holds.
type storeLoss struct {
	name string
	lose func(t *testing.T, r *testcluster.Redis, rdb *redis.Client)
	// afterPoll: the loss is only visible to the poller (eviction): the
	// read waits for one poll before it must be fresh.
	afterPoll bool
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
}

// evictEverything sets a small maxmemory with a volatile policy (restored
// when the test ends) and writes keys with a TTL until the server has
// evicted every key with a TTL it held before: the position keys.
func evictEverything(t *testing.T, _ *testcluster.Redis, rdb *redis.Client) {
	ctx := context.Background()
	old, err := rdb.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rdb.ConfigSet(ctx, "maxmemory", old["maxmemory"])
		rdb.ConfigSet(ctx, "maxmemory-policy", old["maxmemory-policy"])
		rdb.Do(ctx, "EVAL", "for _, k in ipairs(redis.call('KEYS', 'evict-junk-*')) do redis.call('DEL', k) end", "0")
	})
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
	e := newEnv(t, withStore(store))
	b, _ := e.open(withStore(store))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.pauseAll()
	if err := setName(e.db, 1); err != nil {
		t.Fatal(err)
	}
	if got := e.readItem(b, 1); got.Name != "new" {
		t.Fatalf("before the loss: STALE READ %+v", got)
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rdb.Close()
	loss.lose(t, r, rdb)
	if loss.afterPoll {
		time.Sleep(100 * time.Millisecond) // 20 polls
	}
	for i := range 3 {
		if got := e.readItem(b, 1); got.Name != "new" {
			t.Fatalf("read %d after the store lost its data: STALE READ %+v", i, got)
		}
	}
	c, cp := e.open(withStore(store))
	if got := e.readItem(c, 1); got.Name != "new" {
		t.Fatalf("process started after the loss: STALE READ %+v", got)
	}
	if loss.name == "Eviction" {
		if v := pluginMetric(t, cp, "freshread_store_eviction_possible"); v != 1 {
			t.Fatalf("freshread_store_eviction_possible = %v under volatile-random with maxmemory, want 1", v)
		}
	}
	e.resumeAll()
	time.Sleep(100 * time.Millisecond)
	e.mustReplica(e.readItem(b, 1), "after catch-up, the process that saw the loss")
	e.mustReplica(e.readItem(c, 1), "after catch-up, the process started after the loss")
}

// pluginMetric returns the value of the plugin's unlabelled metric name
// (-1 when absent).
func pluginMetric(t *testing.T, p *plugin.Plugin, name string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.Collector())
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
