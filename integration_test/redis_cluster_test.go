package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"gorm.io/gorm"
)

// TestRedisClusterFailoverNeverReadStale: two processes share a position
// store on a Redis Cluster; with the replicas paused, a row written by one
// is read fresh by the other before, during and after a failover of the
// master holding the store's slot, and by a process started after it; once
// the replicas catch up, reads return to them.
func TestRedisClusterFailoverNeverReadStale(t *testing.T) {
	checkClusterFault(t, false, func(ctx context.Context, c *testcluster.RedisCluster, tag string) (func(context.Context) error, error) {
		return func(ctx context.Context) error { _, err := c.Failover(ctx, tag); return err }, nil
	})
}

// TestRedisClusterSlotMoveNeverReadStale is the same through a migration
// of the store's slot to another master (ASK, then MOVED redirections;
// multi-key calls refused with TRYAGAIN while the slot's keys are split).
func TestRedisClusterSlotMoveNeverReadStale(t *testing.T) {
	checkClusterFault(t, false, func(ctx context.Context, c *testcluster.RedisCluster, tag string) (func(context.Context) error, error) {
		return func(ctx context.Context) error { _, err := c.MoveSlot(ctx, tag, 20*time.Millisecond); return err }, nil
	})
}

// TestRedisClusterCrashFailoverNeverReadStale is the same through a crash
// of the store's master that loses the write's raise: the master's link to
// its replica is cut before the write, the master is killed (SIGKILL)
// after it, and the replica the cluster elects has never seen the raise.
func TestRedisClusterCrashFailoverNeverReadStale(t *testing.T) {
	checkClusterFault(t, true, func(ctx context.Context, c *testcluster.RedisCluster, tag string) (func(context.Context) error, error) {
		crash, err := c.CutReplication(ctx, tag)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { _, err := crash(ctx); return err }, nil
	})
}

// clusterFault prepares a fault of the master holding the store's slot
// (tag is the store's hash tag) before the write; the fault it returns
// runs while the other process reads.
type clusterFault func(ctx context.Context, c *testcluster.RedisCluster, tag string) (func(context.Context) error, error)

func checkClusterFault(t *testing.T, loses bool, prepare clusterFault) {
	c := testcluster.RedisClusterFor(t)
	rdb := c.Client(t)
	database := fmt.Sprintf("cluster-%d", time.Now().UnixNano())
	store := func() *lsnstore.Redis { return lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: database}) }
	e := newEnv(t, withStore(store()))
	b, _ := e.open(withStore(store()))
	e.waitReplicaServes(b)
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.pauseAll()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tag := "{" + database + "}" // the store's hash tag: its slot
	fault, err := prepare(ctx, c, tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := setName(e.db, 1); err != nil {
		t.Fatal(err)
	}
	raised, err := store().WritePosition(ctx, []string{"items"})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.readItem(b, 1); got.Name != "new" {
		t.Fatalf("before the fault: STALE READ %+v", got)
	}
	done := make(chan error, 1)
	go func() { done <- fault(ctx) }()
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
	if loses {
		// The fault must really have lost the raise, or this test proves
		// nothing about the plugin's loss detection.
		after, err := lsnstore.NewRedis(c.Client(t), lsnstore.RedisOptions{Database: database, Timeout: 5 * time.Second}).WritePosition(ctx, []string{"items"})
		if err != nil {
			t.Fatal(err)
		}
		if after.Covers(raised) {
			t.Fatalf("the new master has the write's position %v (raised %v): the crash lost nothing", after, raised)
		}
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
	for _, db := range []*gorm.DB{b, late} {
		if got := e.eventuallyReplica(func() served { return e.readItem(db, 1) }, "reads after the fault and the catch-up"); got.Name != "new" {
			t.Fatalf("after catch-up: STALE READ %+v", got)
		}
	}
}
