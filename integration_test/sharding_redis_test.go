package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lookup"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/sharding"
)

// TestShardingRedisDeployments runs the sharded order service with every
// one of its Redis users on one deployment (a single server, a Cluster,
// Sentinel): the ID generator's lease, the lookup cache and each shard's
// position store. New orders get minted IDs (CreateInBatches over the
// shards), legacy orders route through the cached lookup (an IN list of
// them answered by the cache), and, with replay paused, an order updated
// by ID alone is read fresh from its shard's primary while an untouched
// shard reads from a replica.
func TestShardingRedisDeployments(t *testing.T) {
	for _, d := range testcluster.RedisDeployments() {
		t.Run(d.Name, func(t *testing.T) { checkShardingOnRedis(t, d.Client(t)) })
	}
}

func checkShardingOnRedis(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	pg := testcluster.PostgresFor(t)
	// A short lease: a new generator waits one before minting.
	ids, err := sharding.NewIDGenerator(ctx, sharding.IDConfig{Redis: rdb, Prefix: "test:" + t.Name() + ":idgen", LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ids.Close() })
	ldbName := pg.CreateDatabase(t)
	ldb, err := gorm.Open(postgres.Open(pg.PrimaryDSN(ldbName)), quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDB(ldb) })
	look := lookup.New(lookup.Config{DB: ldb, Redis: rdb, Prefix: "test:" + ldbName + ":lookup:", TTL: time.Minute}) // named after the fresh database: a rerun (-count) finds no cache entry of an earlier run
	if err := look.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	e := newShEnv(t, func(c *sharding.Config) {
		c.IDs = ids
		c.Lookup = look
		c.Tables[0].Lookup = true
		for i := range c.Shards {
			c.Shards[i].Freshness.Store = lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: "shard-" + t.Name() + "-" + c.Shards[i].Name, Timeout: time.Second})
		}
	})

	// New orders over every shard, in batches: minted IDs.
	var fresh []ShOrder
	for u := int64(1); u <= 40; u++ {
		fresh = append(fresh, ShOrder{UserID: u * 131, Status: "new"})
	}
	if err := e.db.CreateInBatches(&fresh, 8).Error; err != nil {
		t.Fatal(err)
	}
	for _, o := range fresh {
		if o.ID < 1<<62 {
			t.Fatalf("order of user %d: ID %d was not minted", o.UserID, o.ID)
		}
	}
	// Legacy orders (IDs below 2^62) route through the lookup.
	var legacy []ShOrder
	var legacyIDs []int64
	for i := int64(1); i <= 20; i++ {
		legacy = append(legacy, ShOrder{ID: 5000 + i, UserID: i * 53, Status: "legacy"})
		legacyIDs = append(legacyIDs, 5000+i)
	}
	if err := e.db.Create(&legacy).Error; err != nil {
		t.Fatal(err)
	}
	if e.totalOrders() != 60 {
		t.Fatalf("%d orders on the shards, want 60", e.totalOrders())
	}
	for round := 0; round < 2; round++ {
		var got []ShOrder
		if err := e.db.Where("id IN ?", legacyIDs).Find(&got).Error; err != nil || len(got) != len(legacyIDs) {
			t.Fatalf("IN list of legacy IDs: %d rows, %v", len(got), err)
		}
	}
	if st := look.Stats(); st.Hits < int64(len(legacyIDs)) || st.RedisErrors != 0 {
		t.Fatalf("lookup cache after two IN lists: %+v, want every ID of the second answered by Redis", st)
	}

	// Freshness per shard through the deployment's stores.
	e.waitCaughtUp()
	target, untouched := fresh[0], fresh[0]
	for _, o := range fresh {
		if e.s.ShardOf(o.UserID) != e.s.ShardOf(target.UserID) {
			untouched = o
			break
		}
	}
	read := e.readStatus
	deadline := time.Now().Add(15 * time.Second)
	for s := read(untouched.ID); !e.isReplica(s.Port); s = read(untouched.ID) {
		if time.Now().After(deadline) {
			t.Fatalf("reads of a caught-up shard never reached a replica: %+v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.pauseAll()
	if err := e.db.Model(&ShOrder{}).Where("id = ?", target.ID).Update("status", "paid").Error; err != nil {
		t.Fatal(err)
	}
	if s := read(target.ID); s.Status != "paid" {
		t.Fatalf("STALE READ of an order updated by ID: %+v", s)
	}
	if s := read(untouched.ID); s.Status != "new" || !e.isReplica(s.Port) {
		t.Fatalf("order on an untouched shard: %+v, want it from a replica", s)
	}
	e.resumeAll()
}
