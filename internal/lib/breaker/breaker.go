// Package breaker is the lock-free circuit breaker shared by the plugin's
// position store and the lookup's cache: after a number of consecutive
// failures it opens, callers skip the failing dependency, and after a
// backoff (100ms doubling to 5s) one caller probes it.
package breaker

import (
	"sync/atomic"
	"time"
)

// Breaker stops consulting a failing dependency. The zero value is closed.
type Breaker struct {
	failures  atomic.Int32
	openUntil atomic.Int64 // unix nanos; 0 = closed
	backoff   atomic.Int64 // nanos
}

const (
	// MinBackoff is the first open period.
	MinBackoff = 100 * time.Millisecond
	// MaxBackoff is the longest open period.
	MaxBackoff = 5 * time.Second
)

// Allow reports whether the dependency may be consulted now. When the
// backoff has passed, exactly one caller gets to probe (the others keep
// seeing the breaker open until the probe's result is recorded).
func (b *Breaker) Allow(now time.Time) bool {
	until := b.openUntil.Load()
	if until == 0 {
		return true
	}
	if now.UnixNano() < until {
		return false
	}
	// Half-open: push the deadline out so only this caller probes.
	return b.openUntil.CompareAndSwap(until, now.Add(MaxBackoff).UnixNano())
}

// Success records a call that worked: the breaker closes.
func (b *Breaker) Success() {
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if b.openUntil.Load() != 0 {
		b.openUntil.Store(0)
		b.backoff.Store(0)
	}
}

// Failure records a failed call; the limit-th consecutive one opens the
// breaker (a failed probe doubles the backoff).
func (b *Breaker) Failure(now time.Time, limit int) {
	if int(b.failures.Add(1)) < limit {
		return
	}
	d := time.Duration(b.backoff.Load())
	switch {
	case d == 0:
		d = MinBackoff
	case d < MaxBackoff:
		d *= 2
		if d > MaxBackoff {
			d = MaxBackoff
		}
	}
	b.backoff.Store(int64(d))
	b.openUntil.Store(now.Add(d).UnixNano())
}

// Open reports whether the breaker is open or probing.
func (b *Breaker) Open() bool { return b.openUntil.Load() != 0 }
