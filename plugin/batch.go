package plugin

import (
	"context"
	"slices"
	"sync/atomic"

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

// lookupBatcher queues lookups for its goroutine (run). The queue is a
// lock-free stack (queue, linked by storeLookup.next): a read pushes its
// lookup with one compare-and-swap, and the goroutine takes the whole stack
// with one swap, so reads never wait on each other for a lock.
type lookupBatcher struct {
	p  *Plugin
	br lsnstore.BatchReader
	// live, when the store tells slow from gone, bounds each read's wait
	// (storeLookup.waitFor); its batched calls take the store's longest
	// timeout.
	live   lsnstore.Liveness
	queue  atomic.Pointer[storeLookup]
	closed atomic.Bool   // run has ended: what is queued is answered with errClosed
	wake   chan struct{} // capacity 1
}

func newLookupBatcher(p *Plugin, br lsnstore.BatchReader) *lookupBatcher {
	b := &lookupBatcher{p: p, br: br, wake: make(chan struct{}, 1)}
	b.live, _ = br.(lsnstore.Liveness)
	return b
}

// submit queues l (whose ctx and tables are set) for the next ask.
func (b *lookupBatcher) submit(l *storeLookup) {
	for {
		head := b.queue.Load()
		l.next = head
		if b.queue.CompareAndSwap(head, l) {
			break
		}
	}
	// After the push: if run has ended, its last take may have come before
	// it, so the lookups still queued are answered here (whoever takes
	// the stack answers what it took, once).
	if b.closed.Load() {
		b.failQueued()
		return
	}
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// take empties the queue into batch, oldest first.
func (b *lookupBatcher) take(batch []*storeLookup) []*storeLookup {
	n := len(batch)
	for l := b.queue.Swap(nil); l != nil; {
		next := l.next
		l.next = nil
		batch = append(batch, l)
		l = next
	}
	slices.Reverse(batch[n:])
	return batch
}

// failQueued answers every queued lookup with errClosed.
func (b *lookupBatcher) failQueued() {
	for _, l := range b.take(nil) {
		l.finish(lsnstore.Position{}, errClosed)
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
			b.closed.Store(true)
			b.failQueued()
			return
		}
		for {
			batch = b.take(batch[:0])
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
