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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, rdb := sentinelWithKey(t, ctx)
	// Three rounds: after each failover the killed master rejoins as a
	// replica, so the setup fails over again, losing the stalled writes
	// each time.
	for round := range 3 {
		if err := s.Rejoin(ctx); err != nil {
			t.Fatalf("round %d: rejoin: %v", round, err)
		}
		key := "during-" + string(rune('a'+round))
		s.StallReplication(true)
		if err := rdb.Set(ctx, key, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		old, _ := s.MasterAddr(ctx)
		now, err := s.KillMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: failover %s -> %s", round, old, now)
		c := redis.NewClient(&redis.Options{Addr: now})
		defer c.Close()
		if n := c.Exists(ctx, "before").Val(); n != 1 {
			t.Fatalf("round %d: the new master lacks the key written before the stall", round)
		}
		if n := c.Exists(ctx, key).Val(); n != 0 {
			t.Fatalf("round %d: the new master has the key written during the stall: the stall did not hold", round)
		}
		// For the next round: the key written before the stalls, again
		// (the rejoining server starts empty and syncs it).
		if err := c.Set(ctx, "before", "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRedisSentinelCoordinatedFailover: SENTINEL FAILOVER promotes the
// replica, which lacks a key written while its replication was stalled;
// the old master follows it and loses the key too.
func TestRedisSentinelCoordinatedFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, rdb := sentinelWithKey(t, ctx)
	s.StallReplication(true)
	if err := rdb.Set(ctx, "during", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, _ := s.MasterAddr(ctx)
	now, err := s.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if now == old {
		t.Fatalf("failover kept master %s", now)
	}
	c := redis.NewClient(&redis.Options{Addr: now})
	defer c.Close()
	if n := c.Exists(ctx, "before").Val(); n != 1 {
		t.Fatal("the new master lacks the key written before the stall")
	}
	if n := c.Exists(ctx, "during").Val(); n != 0 {
		t.Fatal("the new master has the key written during the stall: the stall did not hold")
	}
}

// sentinelWithKey starts a Sentinel setup and a client of it, and writes
// the key "before", acknowledged by the replica too.
func sentinelWithKey(t *testing.T, ctx context.Context) (*RedisSentinel, *redis.Client) {
	t.Helper()
	s := RedisSentinelFor(t)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: s.SentinelAddrs()})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	return s, rdb
}
