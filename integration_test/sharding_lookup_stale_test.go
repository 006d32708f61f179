package integration_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lookup"
)

// TestShardingLookupStaleCache: the lookup's cache (Redis) is unreachable
// when a transaction that created order X for user A rolls back, and
// while X is then created for user B on another shard: the table holds
// X -> B, but Redis, reachable again, still holds X -> A (the rollback
// could not delete it, the second Create could not overwrite it). Reads
// and writes by X's ID must still find B's order.
func TestShardingLookupStaleCache(t *testing.T) {
	pg := testcluster.PostgresFor(t)
	r := testcluster.RedisWithArgsFor(t) // its own server: it is paused
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{r.Addr()},
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	admin := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { admin.Close() })
	name := pg.CreateDatabase(t)
	ldb, err := gorm.Open(postgres.Open(pg.PrimaryDSN(name)), quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDB(ldb) })
	st := lookup.New(lookup.Config{DB: ldb, Redis: rdb, Prefix: "test:" + name + ":", TTL: time.Minute})
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	e := newShEnv(t, withLookup(st))
	a, b := int64(1), int64(2) // a is 1: the cached value checked below
	for e.s.ShardOf(b) == e.s.ShardOf(a) {
		b++
	}
	const id = 9001
	ctx := context.Background()
	pause := func() {
		t.Helper()
		if err := admin.Do(ctx, "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
			t.Fatal(err)
		}
	}

	rollback := errors.New("roll back")
	err = e.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&ShOrder{ID: id, UserID: a, Status: "rolled back"}).Error; err != nil {
			return err
		}
		pause() // Redis unreachable from here on, for 1.5 s
		return rollback
	})
	if !errors.Is(err, rollback) {
		t.Fatalf("the rolled-back transaction: %v", err)
	}
	if err := e.db.Create(&ShOrder{ID: id, UserID: b, Status: "kept", Amount: 1}).Error; err != nil {
		t.Fatal(err)
	}
	// Redis answers again (and the lookup's breaker closes after its
	// probe): its entry for the ID is A's.
	deadline := time.Now().Add(15 * time.Second)
	for {
		v, err := admin.Get(ctx, "test:"+name+":9001").Result()
		if err == nil && !st.BreakerOpen() {
			if v != "1" {
				t.Fatalf("the cached pair of order %d names user %s, not A (1): the case is not made", id, v)
			}
			t.Logf("cached pair of order %d: user %s (the table: user %d)", id, v, b)
			break
		}
		if errors.Is(err, redis.Nil) {
			t.Fatalf("no cached pair of order %d: the case is not made", id)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis: %v, breaker open %v", err, st.BreakerOpen())
		}
		time.Sleep(50 * time.Millisecond)
		var x ShOrder
		_ = e.db.Where("id = ?", 1).Find(&x).Error // a lookup call: lets the breaker probe
	}

	var got ShOrder
	if err := e.db.First(&got, id).Error; err != nil || got.UserID != b {
		t.Fatalf("order %d read by ID: %+v, %v; want user %d's", id, got, err, b)
	}
	res := e.db.Model(&ShOrder{}).Where("id = ?", id).Update("amount", 2)
	if res.Error != nil || res.RowsAffected != 1 {
		t.Fatalf("order %d updated by ID: %d rows, %v; want 1", id, res.RowsAffected, res.Error)
	}
	var rows []ShOrder
	if err := e.db.Where("id IN ?", []int64{id, 1}).Find(&rows).Error; err != nil || len(rows) != 1 || rows[0].Amount != 2 {
		t.Fatalf("orders read by an IN list of IDs: %+v, %v; want order %d with amount 2", rows, err, id)
	}
	res = e.db.Delete(&ShOrder{}, id)
	if res.Error != nil || res.RowsAffected != 1 {
		t.Fatalf("order %d deleted by ID: %d rows, %v; want 1", id, res.RowsAffected, res.Error)
	}
	if n := e.totalOrders(); n != 0 {
		t.Fatalf("%d orders left, want 0", n)
	}
}
