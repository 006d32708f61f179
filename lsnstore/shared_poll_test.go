package lsnstore

import (
	"context"
	"testing"
	"time"
)

// TestRedisSharedPoller: one member at a time holds the poller's lease;
// another's publication is refused while it lives and accepted once it
// lapsed or was resigned; the snapshot reads back with its time left,
// and is gone with the lease.
func TestRedisSharedPoller(t *testing.T) {
	ctx := context.Background()
	_, rdb := redisClient(t)
	store := newTestRedis(rdb, RedisOptions{Database: uniqueDB("poller")})
	const lease = 300 * time.Millisecond
	if snap, _, err := store.SharedPoll(ctx); err != nil || snap != nil {
		t.Fatalf("SharedPoll before any publication: %q, %v; want none", snap, err)
	}
	if held, err := store.PublishPoll(ctx, "a", lease, []byte("from a"), lease); err != nil || !held {
		t.Fatalf("a's first publication: %v, %v; want held", held, err)
	}
	if held, err := store.PublishPoll(ctx, "b", lease, []byte("from b"), lease); err != nil || held {
		t.Fatalf("b's publication while a holds the lease: %v, %v; want refused", held, err)
	}
	snap, left, err := store.SharedPoll(ctx)
	if err != nil || string(snap) != "from a" || left <= 0 || left > lease {
		t.Fatalf("SharedPoll: %q, %v left, %v; want a's snapshot with at most %v left", snap, left, err, lease)
	}
	if snap, err := store.GetSharedPoll(ctx); err != nil || string(snap) != "from a" {
		t.Fatalf("GetSharedPoll: %q, %v; want a's snapshot", snap, err)
	}
	time.Sleep(lease + 50*time.Millisecond)
	if snap, _, err := store.SharedPoll(ctx); err != nil || snap != nil {
		t.Fatalf("SharedPoll after the lease lapsed: %q, %v; want none", snap, err)
	}
	if snap, err := store.GetSharedPoll(ctx); err != nil || snap != nil {
		t.Fatalf("GetSharedPoll after the lease lapsed: %q, %v; want none", snap, err)
	}
	if held, err := store.PublishPoll(ctx, "b", lease, []byte("from b"), lease); err != nil || !held {
		t.Fatalf("b's publication after a's lease lapsed: %v, %v; want held", held, err)
	}
	if err := store.ResignPoller(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if snap, _, _ := store.SharedPoll(ctx); string(snap) != "from b" {
		t.Fatalf("a's resignation, which holds nothing, removed b's snapshot: %q", snap)
	}
	if err := store.ResignPoller(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if snap, _, err := store.SharedPoll(ctx); err != nil || snap != nil {
		t.Fatalf("SharedPoll after the holder resigned: %q, %v; want none", snap, err)
	}
	if held, err := store.PublishPoll(ctx, "a", lease, []byte("again"), lease); err != nil || !held {
		t.Fatalf("a's publication after b resigned: %v, %v; want held", held, err)
	}
	if _, err := store.PublishPoll(ctx, "a", 0, nil, lease); err == nil {
		t.Fatal("a zero lease was accepted")
	}
}
