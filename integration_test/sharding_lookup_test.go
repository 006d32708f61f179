package integration_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lookup"
)

// newLookup makes a lookup database and a Store cached in the shared Redis.
func newLookup(t *testing.T, pg *testcluster.Postgres) (*lookup.Store, *gorm.DB, *testcluster.Redis) {
	t.Helper()
	r := testcluster.RedisFor(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{r.Addr()},
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	name := pg.CreateDatabase(t)
	ldb, err := gorm.Open(postgres.Open(pg.PrimaryDSN(name)), quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDB(ldb) })
	st := lookup.New(lookup.Config{DB: ldb, Redis: rdb, Prefix: "test:" + name + ":", TTL: time.Minute}) // the fresh database names the cache, so a rerun (-count) finds none of an earlier run
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st, ldb, r
}

// Old order IDs (not minted) route through the lookup: written before the
// order, cached in Redis, still answered by the table when Redis is down.
func TestShardingLookupRouting(t *testing.T) {
	pg := testcluster.PostgresFor(t)
	st, ldb, r := newLookup(t, pg)
	e := newShEnv(t, withLookup(st))
	// Old-style IDs chosen by the application (no generator).
	var orders []ShOrder
	for i := int64(1); i <= 40; i++ {
		orders = append(orders, ShOrder{ID: 1000 + i, UserID: i * 37, Status: "legacy"})
	}
	if err := e.db.Create(&orders).Error; err != nil {
		t.Fatal(err)
	}
	var n int64
	ldb.Table("order_lookup").Count(&n)
	if n != 40 {
		t.Fatalf("%d lookup rows, want 40", n)
	}
	// Each order-ID query reaches exactly one shard.
	for round := 0; round < 3; round++ {
		for _, o := range orders {
			e.resetCounts()
			var got ShOrder
			if err := e.db.First(&got, o.ID).Error; err != nil || got.UserID != o.UserID {
				t.Fatalf("order %d: %+v %v", o.ID, got, err)
			}
			if c := e.countsSnapshot(); sum(c) != 1 || c[e.s.ShardOf(o.UserID)] != 1 {
				t.Fatalf("order %d: statements %v", o.ID, c)
			}
		}
	}
	// Put cached every pair, so every read hit the cache.
	stats := st.Stats()
	t.Logf("lookup cache after warm-up: %+v, hit rate %.3f", stats, stats.HitRate())
	if stats.HitRate() < 0.99 {
		t.Fatalf("hit rate %.3f after warm-up", stats.HitRate())
	}
	// IN of old IDs: one MGET, then split per shard.
	var some []ShOrder
	if err := e.db.Where("id IN ?", []int64{1001, 1002, 1003, 1004, 1005}).Find(&some).Error; err != nil || len(some) != 5 {
		t.Fatalf("IN of old IDs: %d %v", len(some), err)
	}
	// An unknown old ID: scatter read (empty), cached negative briefly.
	var none []ShOrder
	if err := e.db.Where("id = ?", 999999).Find(&none).Error; err != nil || len(none) != 0 {
		t.Fatalf("unknown ID: %v %v", none, err)
	}
	// Delete removes the lookup row after the order.
	if err := e.db.Delete(&orders[0]).Error; err != nil {
		t.Fatal(err)
	}
	ldb.Table("order_lookup").Where("order_id = ?", orders[0].ID).Count(&n)
	if n != 0 {
		t.Fatal("lookup row of a deleted order remains")
	}

	// Redis down: the table answers, routing stays single-shard.
	if err := r.Stop(context.Background()); err != nil {
		if err == testcluster.ErrUnsupported {
			t.Skip("Redis given by environment: cannot stop it")
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Start(context.Background()) })
	before := st.Stats()
	for _, o := range orders[1:10] {
		e.resetCounts()
		var got ShOrder
		if err := e.db.First(&got, o.ID).Error; err != nil || got.UserID != o.UserID {
			t.Fatalf("Redis down, order %d: %+v %v", o.ID, got, err)
		}
		if c := e.countsSnapshot(); sum(c) != 1 || c[e.s.ShardOf(o.UserID)] != 1 {
			t.Fatalf("Redis down, order %d: statements %v", o.ID, c)
		}
	}
	after := st.Stats()
	if after.RedisErrors <= before.RedisErrors || after.Misses-before.Misses < 9 {
		t.Fatalf("Redis down: stats %+v -> %+v", before, after)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Backfill builds the lookup from the shards in keyset chunks, resumably.
func TestShardingLookupBackfill(t *testing.T) {
	pg := testcluster.PostgresFor(t)
	st, ldb, _ := newLookup(t, pg)
	e := newShEnv(t)
	// Rows written to the shards behind the plugin's back (pre-sharding data).
	for i := int64(1); i <= 250; i++ {
		u := i * 13
		if err := e.direct[e.s.ShardOf(u)].Create(&ShOrder{ID: i, UserID: u, Status: "old"}).Error; err != nil {
			t.Fatal(err)
		}
	}
	e.waitCaughtUp() // the backfill reads through the shards' plugins, which know nothing of these writes
	var sources []lookup.Source
	for _, n := range shardNames {
		sdb, _ := e.s.ShardDB(n)
		sources = append(sources, lookup.Source{Name: n, DB: sdb})
	}
	var out bytes.Buffer
	cfg := lookup.BackfillConfig{Sources: sources, Table: "orders", IDColumn: "id", KeyColumn: "user_id", Chunk: 20, Progress: &out}
	// Interrupt the first run after a few chunks.
	ctx, cancel := context.WithCancel(context.Background())
	lines := 0
	cfg.Progress = writerFunc(func(p []byte) (int, error) {
		out.Write(p)
		if lines++; lines == 3 {
			cancel()
		}
		return len(p), nil
	})
	if _, err := st.Backfill(ctx, cfg); err == nil {
		t.Fatal("interrupted backfill returned no error")
	}
	var partial int64
	ldb.Table("order_lookup").Count(&partial)
	if partial == 0 || partial >= 250 {
		t.Fatalf("%d rows after the interrupted run", partial)
	}
	cfg.Progress = &out
	n, err := st.Backfill(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ldb.Table("order_lookup").Count(&total)
	if total != 250 || n != 250-partial {
		t.Fatalf("after resume: %d rows in the lookup, second run wrote %d (first %d)", total, n, partial)
	}
	if !strings.Contains(out.String(), "last id") {
		t.Fatalf("no progress output: %q", out.String())
	}
	t.Logf("progress:\n%s", out.String())
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
