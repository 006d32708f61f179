package plugin

import (
	"errors"
	"sync/atomic"
	"time"
)

// errBreakerOpen is the store error while the breaker is open.
var errBreakerOpen = errors.New("plugin: store circuit breaker open")

// errClosed answers the lookups still queued when the plugin closes.
var errClosed = errors.New("plugin: closed")

// breaker stops consulting a failing store: after `limit` consecutive
// failures it opens, reads go to the primary without asking the store, and
// after a backoff (100ms doubling to 5s) one read probes it. Lock-free.
type breaker struct {
	failures  atomic.Int32
	openUntil atomic.Int64 // unix nanos; 0 = closed
	backoff   atomic.Int64 // nanos
}

const (
	breakerMinBackoff = 100 * time.Millisecond
	breakerMaxBackoff = 5 * time.Second
)

// allow reports whether the store may be consulted now. When the backoff
// has passed, exactly one caller gets to probe (the others keep seeing the
// breaker open until the probe's result is recorded).
func (b *breaker) allow(now time.Time) bool {
	until := b.openUntil.Load()
	if until == 0 {
		return true
	}
	if now.UnixNano() < until {
		return false
	}
	// Half-open: push the deadline out so only this caller probes.
	return b.openUntil.CompareAndSwap(until, now.Add(breakerMaxBackoff).UnixNano())
}

func (b *breaker) success() {
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if b.openUntil.Load() != 0 {
		b.openUntil.Store(0)
		b.backoff.Store(0)
	}
}

func (b *breaker) failure(now time.Time, limit int) {
	if int(b.failures.Add(1)) < limit {
		return
	}
	d := time.Duration(b.backoff.Load())
	switch {
	case d == 0:
		d = breakerMinBackoff
	case d < breakerMaxBackoff:
		d *= 2
		if d > breakerMaxBackoff {
			d = breakerMaxBackoff
		}
	}
	b.backoff.Store(int64(d))
	b.openUntil.Store(now.Add(d).UnixNano())
}

// breakerOpen reports whether the store's breaker is open or probing:
// reads then take the sequential path, which does not ask the store
// while it is open.
func (p *Plugin) breakerOpen() bool { return p.breaker.openUntil.Load() != 0 }
