package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/testcluster"
	"github.com/freshread/freshread/lsnstore"
)

// TestRedisClusterFailoverNeverReadStale: two processes share a position
// store on a Redis Cluster; with the replicas paused, a row written by one
// is read fresh by the other before, during and after a failover of the
// master holding the store's slot, and by a process started after it; once
// the replicas catch up, reads return to them (issue 19).
func TestRedisClusterFailoverNeverReadStale(t *testing.T) {
	checkClusterFault(t, func(ctx context.Context, c *testcluster.RedisCluster, tag string) error {
		_, err := c.Failover(ctx, tag)
		return err
	})
}

// TestRedisClusterSlotMoveNeverReadStale is the same through a migration
// of the store's slot to another master (ASK, then MOVED redirections;
// multi-key calls refused with TRYAGAIN while the slot's keys are split).
func TestRedisClusterSlotMoveNeverReadStale(t *testing.T) {
	checkClusterFault(t, func(ctx context.Context, c *testcluster.RedisCluster, tag string) error {
		_, err := c.MoveSlot(ctx, tag, 20*time.Millisecond)
		return err
	})
}

func checkClusterFault(t *testing.T, fault func(ctx context.Context, c *testcluster.RedisCluster, tag string) error) {
	c := testcluster.RedisClusterFor(t)
	rdb := c.Client(t)
	database := fmt.Sprintf("cluster-%d", time.Now().UnixNano())
	store := func() *lsnstore.Redis { return lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: database}) }
	e := newEnv(t, withStore(store()))
	b, _ := e.open(withStore(store()))
	e.waitReplicaServes(b)
	e.staleOnReplicas()
	if got := e.readItem(b, 1); got.Name != "new" {
		t.Fatalf("before the failover: STALE READ %+v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- fault(ctx, c, "{"+database+"}") // the store's hash tag: its slot
	}()
	for failing := true; failing; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			failing = false
		default:
		}
		if got := e.readItem(b, 1); got.Name != "new" {
			t.Fatalf("during the fault: STALE READ %+v", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range 3 {
		if got := e.readItem(b, 1); got.Name != "new" {
			t.Fatalf("read %d after the fault: STALE READ %+v", i, got)
		}
	}
	late, _ := e.open(withStore(store()))
	if got := e.readItem(late, 1); got.Name != "new" {
		t.Fatalf("process started after the fault: STALE READ %+v", got)
	}
	e.resumeAll()
	deadline := time.Now().Add(15 * time.Second)
	for got := e.readItem(b, 1); !e.isReplica(got.Port); got = e.readItem(b, 1) {
		if time.Now().After(deadline) {
			t.Fatalf("reads never returned to the replicas after the fault: %+v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.mustReplica(e.readItem(late, 1), "after catch-up, the process started after the fault")
}
