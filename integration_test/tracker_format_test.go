package integration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread"
	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/tracker"
)

// TestTrackerStoreFormat: a tracker whose store holds the record of a
// newer release that does not run beside this build's format publishes
// nothing (no replay position reaches the store), is not ready, and logs
// an ERROR naming both releases; once that record is gone it records its
// own format and publishes.
func TestTrackerStoreFormat(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	storeName := "trackerformat-" + e.dbName
	rdb := redis.NewClient(&redis.Options{Addr: testcluster.RedisFor(t).Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	key := lsnstore.DefaultPrefix + "{" + storeName + "}-format"
	newer := "2:2:9.0.0"
	if err := rdb.ZAdd(ctx, key, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: newer}).Err(); err != nil {
		t.Fatal(err)
	}
	run := startTracker(e, storeName, tracker.ModeNone)
	store := lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: storeName, Timeout: time.Second})

	// Refused: nothing published for a while, not ready, one ERROR.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if got, err := store.ReplayPositions(ctx); err == nil && len(got) > 0 {
			t.Fatalf("a tracker refused by the store's format published replay positions %v", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	err := run.tr.Ready(ctx, time.Second)
	if err == nil || !strings.Contains(err.Error(), "publishing nothing") || !strings.Contains(err.Error(), "9.0.0") {
		t.Fatalf("Ready of a refused tracker = %v, want an error saying it publishes nothing beside 9.0.0", err)
	}
	logs := run.logs.String()
	if !strings.Contains(logs, `"level":"ERROR"`) || !strings.Contains(logs, "cannot run beside") || !strings.Contains(logs, "9.0.0") {
		t.Fatalf("the tracker's logs do not name the refusal:\n%s", logs)
	}

	// The newer release's record is gone: the tracker records its format
	// and publishes.
	if err := rdb.ZRem(ctx, key, newer).Err(); err != nil {
		t.Fatal(err)
	}
	waitReady(t, run.tr, 20*time.Second)
	deadline = time.Now().Add(20 * time.Second)
	for {
		got, err := store.ReplayPositions(ctx)
		if err == nil && len(got) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no replay position published after the format was accepted: %v, %v", got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	members, err := rdb.ZRange(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := "1:1:" + freshread.Version(); len(members) != 1 || members[0] != want {
		t.Fatalf("the format key holds %q, want the tracker's own record [%q]", members, want)
	}
}
