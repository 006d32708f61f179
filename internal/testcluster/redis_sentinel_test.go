package testcluster

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRedisSentinelFailoverLosesStalledWrites: with the replica's
// replication stalled, a key written on the master is missing on the
// master the sentinels promote after the old one is killed; a key
// written before the stall is there.
func TestRedisSentinelFailoverLosesStalledWrites(t *testing.T) {
	s := RedisSentinelFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: s.SentinelAddrs()})
	defer rdb.Close()
	if err := rdb.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	s.StallReplication(true)
	if err := rdb.Set(ctx, "during", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, _ := s.MasterAddr(ctx)
	now, err := s.KillMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover %s -> %s", old, now)
	c := redis.NewClient(&redis.Options{Addr: now})
	defer c.Close()
	if n := c.Exists(ctx, "before").Val(); n != 1 {
		t.Fatalf("the new master lacks the key written before the stall")
	}
	if n := c.Exists(ctx, "during").Val(); n != 0 {
		t.Fatalf("the new master has the key written during the stall: the stall did not hold")
	}
}
