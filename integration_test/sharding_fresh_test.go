package integration_test

import (
	"testing"
	"time"

	"github.com/freshread/freshread/sharding"
)

type shServed struct {
	Status string
	Port   int
}

// readStatus reads order id's status through the sharding plugin with
// the serving port.
func (e *shEnv) readStatus(id int64) shServed {
	e.t.Helper()
	var s shServed
	if err := e.db.Model(&ShOrder{}).Select("status, inet_server_port() AS port").Where("id = ?", id).Scan(&s).Error; err != nil {
		e.t.Fatal(err)
	}
	return s
}

// Freshness applies per shard: with replay paused on the replicas, a new
// order on shard s2 is read from s2's primary (never stale from a
// replica), while an untouched shard still reads from a replica.
func TestShardingFreshnessPerShard(t *testing.T) {
	e := newShEnv(t, withIDs(fixedIDs(t, 9)))
	user2 := int64(600) // bucket 600 -> s2
	user0 := int64(5)   // bucket 5 -> s0
	if e.s.ShardOf(user2) != "s2" || e.s.ShardOf(user0) != "s0" {
		t.Fatal("test users on unexpected shards")
	}
	old := ShOrder{UserID: user0, Status: "old"}
	if err := e.db.Create(&old).Error; err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp()

	read := e.readStatus
	if s := read(old.ID); s.Status != "old" || !e.isReplica(s.Port) {
		t.Fatalf("caught-up read: %+v, want a replica", s)
	}

	e.pauseAll()
	o := ShOrder{UserID: user2, Status: "fresh"}
	if err := e.db.Create(&o).Error; err != nil {
		t.Fatal(err)
	}
	if s := read(o.ID); s.Status != "fresh" || s.Port != e.pg.PrimaryPort() {
		t.Fatalf("read of the new order on s2: %+v, want it from the primary %d", s, e.pg.PrimaryPort())
	}
	// An update on s2 is not read stale either.
	if err := e.db.Model(&o).Update("status", "paid").Error; err != nil {
		t.Fatal(err)
	}
	if s := read(o.ID); s.Status != "paid" {
		t.Fatalf("read after update: %+v", s)
	}
	// s0 had no write: its replicas are still fresh for it.
	if s := read(old.ID); s.Status != "old" || !e.isReplica(s.Port) {
		t.Fatalf("untouched shard: %+v, want a replica", s)
	}
	e.resumeAll()
}

// keyedShards turns on keyed positions, with orders keyed by user_id too,
// in every shard's freshness plugin.
func keyedShards(c *sharding.Config) {
	for i := range c.Shards {
		c.Shards[i].Freshness.TablePositions = false
		c.Shards[i].Freshness.KeyColumns = map[string][]string{"orders": {"user_id"}}
	}
}

// Keyed positions apply per shard: with replay paused, a write of one
// user's orders on a shard leaves reads of another user's orders on the
// same shard on the replicas (by user_id after a write by user_id, by
// order ID after a write by order ID), and the written orders are never
// read stale.
func TestShardingKeyedPositions(t *testing.T) {
	e := newShEnv(t, withIDs(fixedIDs(t, 9)), keyedShards)
	userA, userB := int64(5), int64(6) // buckets 5 and 6: both on s0
	if e.s.ShardOf(userA) != "s0" || e.s.ShardOf(userB) != "s0" {
		t.Fatal("test users on unexpected shards")
	}
	a, b := ShOrder{UserID: userA, Status: "old"}, ShOrder{UserID: userB, Status: "old"}
	for _, o := range []*ShOrder{&a, &b} {
		if err := e.db.Create(o).Error; err != nil {
			t.Fatal(err)
		}
	}
	e.waitCaughtUp()
	read := func(q string, v int64) shServed {
		t.Helper()
		var s shServed
		if err := e.db.Model(&ShOrder{}).Select("status, inet_server_port() AS port").Where(q, v).Scan(&s).Error; err != nil {
			t.Fatal(err)
		}
		return s
	}
	// waitReplica waits until the shard's plugin sees its replicas caught
	// up: a read of order B is served by one.
	waitReplica := func() {
		t.Helper()
		e.waitCaughtUp()
		deadline := time.Now().Add(10 * time.Second)
		for s := read("id = ?", b.ID); !e.isReplica(s.Port); s = read("id = ?", b.ID) {
			if time.Now().After(deadline) {
				t.Fatalf("caught-up read of order B: %+v, never from a replica", s)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitReplica()

	e.pauseAll()
	if err := e.db.Model(&ShOrder{}).Where("user_id = ?", userA).Update("status", "paid").Error; err != nil {
		t.Fatal(err)
	}
	if s := read("id = ?", a.ID); s.Status != "paid" {
		t.Fatalf("STALE READ of order A by ID after its write: %+v", s)
	}
	if s := read("user_id = ?", userA); s.Status != "paid" {
		t.Fatalf("STALE READ of user A's orders after their write: %+v", s)
	}
	if s := read("user_id = ?", userB); s.Status != "old" || !e.isReplica(s.Port) {
		t.Fatalf("user B's orders after a write of user A's on the same shard: %+v, want them from a replica", s)
	}
	// A write by order ID (it proves no user_id: reads by user_id wait for
	// it, reads by order ID of other orders do not).
	e.resumeAll()
	waitReplica()
	e.pauseAll()
	if err := e.db.Model(&a).Update("status", "shipped").Error; err != nil {
		t.Fatal(err)
	}
	if s := read("user_id = ?", userA); s.Status != "shipped" {
		t.Fatalf("STALE READ of user A's orders after a write by order ID: %+v", s)
	}
	if s := read("id = ?", b.ID); s.Status != "old" || !e.isReplica(s.Port) {
		t.Fatalf("order B by ID after a write of order A on the same shard: %+v, want it from a replica", s)
	}
	e.resumeAll()
}
