package testcluster

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestRedisCluster: the cluster serves keys of every slot range through a
// ClusterClient; a failover of a key's master, and moving a key's slot to
// another master, keep the key.
func TestRedisCluster(t *testing.T) {
	c := RedisClusterFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := c.Client(t)
	for i := 0; i < 30; i++ {
		if err := rdb.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	masters := map[string]bool{}
	for i := 0; i < 30; i++ {
		k := fmt.Sprintf("k%d", i)
		slot, err := rdb.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		masters[fmt.Sprint(slot*3/16384)] = true
	}
	if len(masters) != 3 {
		t.Fatalf("keys on %d slot ranges, want 3", len(masters))
	}
	before, err := rdb.MasterForKey(ctx, "k1")
	if err != nil {
		t.Fatal(err)
	}
	addr, err := c.Failover(ctx, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if addr == before.Options().Addr {
		t.Fatalf("failover kept master %s", addr)
	}
	if got, err := rdb.Get(ctx, "k1").Int(); err != nil || got != 1 {
		t.Fatalf("k1 after the failover: %v, %v", got, err)
	}
	// Moving k2's slot to another master keeps it readable.
	before, err = rdb.MasterForKey(ctx, "k2")
	if err != nil {
		t.Fatal(err)
	}
	addr, err = c.MoveSlot(ctx, "k2", time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if addr == before.Options().Addr {
		t.Fatalf("the slot stayed on %s", addr)
	}
	if got, err := rdb.Get(ctx, "k2").Int(); err != nil || got != 2 {
		t.Fatalf("k2 after its slot moved: %v, %v", got, err)
	}
}

// TestRedisClusterCrashLosesWrites: a write the master acknowledged after
// CutReplication is gone once the crash has promoted the replica, and the
// cluster serves the key's slot again.
func TestRedisClusterCrashLosesWrites(t *testing.T) {
	c := RedisClusterFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := c.Client(t)
	if err := rdb.Set(ctx, "k3", "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The replica has the first value before the link is cut.
	master, err := rdb.MasterForKey(ctx, "k3")
	if err != nil {
		t.Fatal(err)
	}
	if err := master.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	crash, err := c.CutReplication(ctx, "k3")
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, "k3", "lost", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr, err := crash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if addr == master.Options().Addr {
		t.Fatalf("the crash kept master %s", addr)
	}
	fresh := c.Client(t)
	if got, err := fresh.Get(ctx, "k3").Result(); err != nil || got != "kept" {
		t.Fatalf("k3 after the crash failover: %q, %v; want the value from before the cut", got, err)
	}
}
