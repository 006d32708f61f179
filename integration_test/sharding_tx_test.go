package integration_test

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/freshread/freshread/sharding"
)

// A transaction stays on one shard; a statement for another shard inside it
// errors, and the transaction rolls back cleanly.
func TestShardingTransactionCrossShardRollsBack(t *testing.T) {
	e := newShEnv(t, withIDs(fixedIDs(t, 6)))
	a, b := int64(1), int64(300)
	if e.s.ShardOf(a) == e.s.ShardOf(b) {
		t.Fatal("test users share a shard")
	}
	// Commit: several statements on user a's shard.
	err := e.s.ForUser(e.db, a).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&ShOrder{UserID: a, Status: "t1"}).Error; err != nil {
			return err
		}
		if err := tx.Create(&ShItem{UserID: a, Sku: "x"}).Error; err != nil {
			return err
		}
		var n int64
		if err := tx.Model(&ShOrder{}).Where("user_id = ?", a).Count(&n).Error; err != nil || n != 1 {
			t.Errorf("count inside the transaction: %d %v", n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.onShard(e.s.ShardOf(a))) != 1 {
		t.Fatal("committed order missing")
	}
	// Cross-shard statement: error, and the first insert is rolled back.
	var crossErr error
	err = e.s.ForUser(e.db, a).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&ShOrder{UserID: a, Status: "t2"}).Error; err != nil {
			return err
		}
		crossErr = tx.Create(&ShOrder{UserID: b, Status: "t2"}).Error
		return crossErr
	})
	if !errors.Is(crossErr, sharding.ErrCrossShard) || !errors.Is(err, sharding.ErrCrossShard) {
		t.Fatalf("cross-shard insert: %v / %v, want ErrCrossShard", crossErr, err)
	}
	if n := len(e.onShard(e.s.ShardOf(a))); n != 1 {
		t.Fatalf("shard of a has %d orders after the rollback, want 1", n)
	}
	if n := len(e.onShard(e.s.ShardOf(b))); n != 0 {
		t.Fatalf("shard of b has %d orders, want 0", n)
	}
	// Scatter read, unsharded table and a hint for another shard: errors too.
	tx := e.s.ForUser(e.db, a).Begin()
	var x []ShOrder
	if err := tx.Where("status = ?", "t1").Find(&x).Error; !errors.Is(err, sharding.ErrCrossShard) {
		t.Fatalf("scatter in a transaction: %v", err)
	}
	var p ShProduct
	if err := tx.First(&p, 1).Error; !errors.Is(err, sharding.ErrCrossShard) {
		t.Fatalf("default-database table in a shard transaction: %v", err)
	}
	if err := tx.Clauses(sharding.Shard(e.s.ShardOf(b))).Find(&x).Error; !errors.Is(err, sharding.ErrCrossShard) {
		t.Fatalf("hint for another shard in a transaction: %v", err)
	}
	if err := tx.Rollback().Error; err != nil {
		t.Fatal(err)
	}
	// A transaction begun on the default database lives on the shard of
	// its first statement: a second shard is refused, and rolled back.
	err = e.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&ShOrder{UserID: a}).Error; err != nil {
			return err
		}
		return tx.Create(&ShOrder{UserID: b}).Error
	})
	if !errors.Is(err, sharding.ErrCrossShard) {
		t.Fatalf("two shards in a default-database transaction: %v", err)
	}
	// Nested transaction (savepoint) on the shard.
	err = e.s.ForUser(e.db, a).Transaction(func(tx *gorm.DB) error {
		_ = tx.Transaction(func(tx2 *gorm.DB) error {
			tx2.Create(&ShOrder{UserID: a, Status: "inner"})
			return errors.New("roll back the savepoint")
		})
		return tx.Create(&ShOrder{UserID: a, Status: "outer"}).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	var statuses []string
	e.direct[e.s.ShardOf(a)].Model(&ShOrder{}).Order("status").Pluck("status", &statuses)
	if len(statuses) != 2 || statuses[0] != "outer" || statuses[1] != "t1" {
		t.Fatalf("statuses %v, want [outer t1]", statuses)
	}
}

// A hot user lands on its dedicated shard, for creates, reads, and IDs.
func TestShardingHotUser(t *testing.T) {
	const hot = int64(4242)
	g := fixedIDs(t, 7)
	e := newShEnv(t, withIDs(g), func(c *sharding.Config) { c.HotUsers = map[int64]string{hot: "s3"} })
	normal := sharding.EvenBuckets(1024, shardNames...).Bucket(hot) * 4 / 1024
	if shardNames[normal] == "s3" {
		t.Fatal("pick a hot user whose bucket is not on s3")
	}
	if e.s.ShardOf(hot) != "s3" {
		t.Fatalf("ShardOf(hot) = %s", e.s.ShardOf(hot))
	}
	var orders []ShOrder
	for i := 0; i < 10; i++ {
		orders = append(orders, ShOrder{UserID: hot, Status: "big"})
	}
	orders = append(orders, ShOrder{UserID: 1, Status: "small"})
	if err := e.db.Create(&orders).Error; err != nil {
		t.Fatal(err)
	}
	on3 := e.onShard("s3")
	for _, o := range orders[:10] {
		if on3[o.ID] != hot {
			t.Fatalf("hot order %d not on s3", o.ID)
		}
		if d, _ := sharding.DecodeID(o.ID); !d.Hot || d.Shard != 3 {
			t.Fatalf("hot order ID decodes to %+v", d)
		}
	}
	if len(e.onShard(shardNames[normal])) != 0 && shardNames[normal] != e.s.ShardOf(1) {
		t.Fatal("hot user's rows on its bucket's shard")
	}
	e.resetCounts()
	var got ShOrder
	if err := e.db.First(&got, orders[3].ID).Error; err != nil || got.UserID != hot {
		t.Fatalf("hot order by ID: %+v %v", got, err)
	}
	var mine []ShOrder
	if err := e.db.Where("user_id = ?", hot).Find(&mine).Error; err != nil || len(mine) != 10 {
		t.Fatalf("hot user's orders: %d %v", len(mine), err)
	}
	if c := e.countsSnapshot(); c["s3"] != 2 || sum(c) != 2 {
		t.Fatalf("statements %v, want 2 on s3", c)
	}
}

// The hint pins a statement to a shard (admin work).
func TestShardingHint(t *testing.T) {
	e := newShEnv(t, withIDs(fixedIDs(t, 8)))
	for u := int64(1); u <= 16; u++ {
		e.db.Create(&ShOrder{UserID: u * 64, Status: "h"})
	}
	e.resetCounts()
	var onS2 []ShOrder
	if err := e.db.Clauses(sharding.Shard("s2")).Find(&onS2).Error; err != nil {
		t.Fatal(err)
	}
	if len(onS2) != len(e.onShard("s2")) {
		t.Fatalf("hint read %d rows, s2 has %d", len(onS2), len(e.onShard("s2")))
	}
	var n int64
	if err := e.db.Clauses(sharding.Shard("s2")).Model(&ShOrder{}).Count(&n).Error; err != nil || int(n) != len(onS2) {
		t.Fatalf("hinted count %d %v", n, err)
	}
	if err := e.db.Clauses(sharding.Shard("s2")).Exec("ANALYZE orders").Error; err != nil {
		t.Fatal(err)
	}
	if c := e.countsSnapshot(); c["s2"] != 3 || sum(c) != 3 {
		t.Fatalf("statements %v, want 3 on s2", c)
	}
	if err := e.db.Clauses(sharding.Shard("nope")).Find(&onS2).Error; !errors.Is(err, sharding.ErrUnknownShard) {
		t.Fatalf("unknown shard: %v", err)
	}
	// On(db, name) pins a session the same way.
	var viaOn []ShOrder
	if err := e.s.On(e.db, "s2").Find(&viaOn).Error; err != nil || len(viaOn) != len(onS2) {
		t.Fatalf("On: %d %v", len(viaOn), err)
	}
	_ = context.Background()
}
