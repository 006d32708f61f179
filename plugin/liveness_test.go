package plugin

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// slowStore answers batched lookups after delay; answering tells whether
// the store reports other answers meanwhile (lsnstore.Liveness).
type slowStore struct {
	lsnstore.Store
	delay     time.Duration
	bound     time.Duration
	answering atomic.Bool
}

func (s *slowStore) WritePositions(ctx context.Context, sets [][]string) ([]lsnstore.Position, error) {
	time.Sleep(s.delay)
	return make([]lsnstore.Position, len(sets)), nil
}

func (s *slowStore) ReadBound() time.Duration { return s.bound }

func (s *slowStore) AnsweredSince(time.Time) bool { return s.answering.Load() }

// TestLookupWaitsWhileTheStoreAnswers: a batched lookup later than the
// store's read bound is waited for while the store answers other calls
// (slow, not gone), and given up on at the bound when it answers nothing.
func TestLookupWaitsWhileTheStoreAnswers(t *testing.T) {
	store := &slowStore{Store: lsnstore.NewMemory(), delay: 300 * time.Millisecond, bound: 20 * time.Millisecond}
	p := &Plugin{stop: make(chan struct{})}
	p.cfg.BreakerFailures = 3
	p.batcher = newLookupBatcher(p, store)
	go p.batcher.run(p.stop)
	defer close(p.stop)

	store.answering.Store(true)
	if _, err := p.startLookup(context.Background(), []string{"t"}).waitFor(p); err != nil {
		t.Fatalf("a store that answers other calls, this one late: %v, want the late answer", err)
	}

	// Silent: given up on before the answer (which would be no error).
	store.answering.Store(false)
	_, err := p.startLookup(context.Background(), []string{"t"}).waitFor(p)
	if !errors.Is(err, errStoreSilent) {
		t.Fatalf("a store that answers nothing: %v, want errStoreSilent", err)
	}
}
