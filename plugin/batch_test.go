package plugin

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// tableStore answers each batched set with the position its first table
// names ("t17" → 17), so a lookup's answer says whose it is.
type tableStore struct {
	lsnstore.Store
	mu    sync.Mutex
	calls int
}

func (s *tableStore) WritePositions(ctx context.Context, sets [][]string) ([]lsnstore.Position, error) {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	out := make([]lsnstore.Position, len(sets))
	for i, set := range sets {
		n, err := strconv.ParseUint(set[0][1:], 10, 64)
		if err != nil {
			return nil, err
		}
		out[i] = lsnstore.PositionOf(lsnstore.LSN(n))
	}
	return out, nil
}

// TestBatcherAnswersEachLookupOnce: lookups submitted from many goroutines
// at once each get their own answer, exactly once; and lookups submitted while and after the batcher stops
// are answered with errClosed, none left waiting.
func TestBatcherAnswersEachLookupOnce(t *testing.T) {
	store := &tableStore{Store: lsnstore.NewMemory()}
	p := &Plugin{stop: make(chan struct{})}
	p.cfg.BreakerFailures = 3
	p.batcher = newLookupBatcher(p, store)
	ran := make(chan struct{})
	go func() { p.batcher.run(p.stop); close(ran) }()

	const goroutines, each = 16, 200
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				n := uint64(g*each + i + 1)
				pos, err := p.startLookup(context.Background(), []string{"t" + strconv.FormatUint(n, 10)}).wait()
				if err != nil || !pos.Equal(lsnstore.PositionOf(lsnstore.LSN(n))) {
					errs <- errors.New("lookup " + strconv.FormatUint(n, 10) + ": got " + pos.String() + ", err " + errString(err))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	store.mu.Lock()
	t.Logf("%d lookups in %d store calls", goroutines*each, store.calls)
	store.mu.Unlock()

	// Submitted around the stop: every one answered (with a position
	// before it, errClosed after), none twice (done holds one answer: a
	// second finish would block the batcher or the submitter forever).
	answered := make(chan error, goroutines*each)
	for range goroutines {
		wg.Go(func() {
			for range each {
				_, err := p.startLookup(context.Background(), []string{"t1"}).wait()
				answered <- err
			}
		})
	}
	close(p.stop)
	done := make(chan struct{})
	go func() { wg.Wait(); <-ran; close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("lookups submitted around the batcher's stop were left waiting")
	}
	close(answered)
	var closed int
	for err := range answered {
		switch {
		case errors.Is(err, errClosed):
			closed++
		case err != nil:
			t.Fatalf("lookup around the stop: %v", err)
		}
	}
	if closed == 0 {
		t.Log("no lookup came after the stop this time")
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
