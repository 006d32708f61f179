package integration_test

import (
	"testing"
	"time"
)

type shServed struct {
	Status string
	Port   int
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
	time.Sleep(50 * time.Millisecond) // the shards' pollers see the replicas caught up

	read := func(id int64) shServed {
		t.Helper()
		var s shServed
		if err := e.db.Model(&ShOrder{}).Select("status, inet_server_port() AS port").Where("id = ?", id).Scan(&s).Error; err != nil {
			t.Fatal(err)
		}
		return s
	}
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
