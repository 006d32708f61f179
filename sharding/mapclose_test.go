package sharding

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// blockingStore is a fakeStore whose Load, once blocked, waits for its
// context: a refresh that Close interrupts.
type blockingStore struct {
	*fakeStore
	mu      sync.Mutex
	block   bool
	blocked chan struct{} // closed when a Load waits
}

func (b *blockingStore) Load(ctx context.Context) (BucketMap, []MoveStatus, bool, error) {
	b.mu.Lock()
	block := b.block
	b.mu.Unlock()
	if !block {
		return b.fakeStore.Load(ctx)
	}
	close(b.blocked)
	<-ctx.Done()
	return BucketMap{}, nil, false, ctx.Err()
}

// Close in the middle of a refresh is a normal stop: the follower's
// cancelled Load is logged at no level above INFO and not counted as a
// refresh error.
func TestMapCloseLogsNoError(t *testing.T) {
	// The handler's writes are done when Close has waited for the
	// follower: a plain buffer, read after Close.
	var out bytes.Buffer
	store := &blockingStore{fakeStore: &fakeStore{}, blocked: make(chan struct{})}
	mt := newMapTest(t, store.fakeStore, func(c *Config) {
		c.Map = store
		c.Logger = slog.New(slog.NewTextHandler(&out, nil))
	})
	waitFor(t, "loads", time.Second, func() bool { return store.loadCount() > 1 })
	store.mu.Lock()
	store.block = true
	store.mu.Unlock()
	select {
	case <-store.blocked:
	case <-time.After(time.Second):
		t.Fatal("no refresh reached the store")
	}
	if err := mt.s.Close(); err != nil {
		t.Fatal(err)
	}
	if log := out.String(); strings.Contains(log, "level=ERROR") || strings.Contains(log, "level=WARN") {
		t.Fatalf("a normal Close logged:\n%s", log)
	}
	if n := mt.s.stats.refreshErrors.Load(); n != 0 {
		t.Fatalf("%d refresh errors counted at Close", n)
	}
}
