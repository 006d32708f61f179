package plugin

import (
	"context"
	"sync"

	"github.com/freshread/freshread/lsnstore"
)

// Batched lookups: the store lookups of overlapped reads
// (overlap.go) go to one goroutine that asks the store for every lookup
// queued since its last ask in one round trip (lsnstore.BatchReader: one
// MGET of the union of their keys). A lookup is queued after its read
// began and every ask is sent after it takes its queue, so each read's
// answer is read from the store after the read began, as the sequential
// path's is. With one ask in flight at a time, reads that arrive during an
// ask share the next: under concurrency many reads cost one round trip.

// lookupBatcher queues lookups for its goroutine (run).
type lookupBatcher struct {
	p  *Plugin
	br lsnstore.BatchReader
	// live, when the store tells slow from gone, bounds each read's wait
	// (storeLookup.waitFor); its batched calls take the store's longest
	// timeout.
	live   lsnstore.Liveness
	mu     sync.Mutex
	q      []*storeLookup
	closed bool          // run has ended: submit answers at once
	wake   chan struct{} // capacity 1
}

func newLookupBatcher(p *Plugin, br lsnstore.BatchReader) *lookupBatcher {
	b := &lookupBatcher{p: p, br: br, wake: make(chan struct{}, 1)}
	b.live, _ = br.(lsnstore.Liveness)
	return b
}

// submit queues l (whose ctx and tables are set) for the next ask.
func (b *lookupBatcher) submit(l *storeLookup) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		l.finish(lsnstore.Position{}, errClosed)
		return
	}
	b.q = append(b.q, l)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// run asks the store for each batch until stop closes, then fails what is
// still queued.
func (b *lookupBatcher) run(stop <-chan struct{}) {
	var batch []*storeLookup
	var sets [][]string
	for {
		select {
		case <-b.wake:
		case <-stop:
			b.mu.Lock()
			batch, b.q, b.closed = b.q, nil, true
			b.mu.Unlock()
			for _, l := range batch {
				l.finish(lsnstore.Position{}, errClosed)
			}
			return
		}
		for {
			b.mu.Lock()
			batch, b.q = b.q, batch[:0]
			b.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			sets = b.ask(batch, sets[:0])
			clear(batch)
		}
	}
}

// ask answers batch with one store call, through the circuit breaker.
func (b *lookupBatcher) ask(batch []*storeLookup, sets [][]string) [][]string {
	for _, l := range batch {
		sets = append(sets, l.tables)
	}
	// The first read's context carries its values (tracing, the
	// benchmarks' marks), not its deadline: the store bounds its calls.
	ctx := context.WithoutCancel(batch[0].ctx)
	var positions []lsnstore.Position
	err := b.p.askStore(func() (err error) {
		positions, err = b.br.WritePositions(ctx, sets)
		return err
	})
	for i, l := range batch {
		if err != nil {
			l.finish(lsnstore.Position{}, err)
			continue
		}
		l.finish(b.p.withFloor(positions[i]), nil)
	}
	clear(sets)
	return sets
}
