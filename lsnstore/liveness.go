package lsnstore

import (
	"sync/atomic"
	"time"
)

// Liveness is a store whose answers can be late without the store being
// gone. A batched lookup (BatchReader) is given the store's longest
// timeout; the read that waits for it asks ReadBound how long a usual
// answer takes, and past it, AnsweredSince whether the store has answered
// anything since: a store that keeps answering (late, because it or the
// machine is loaded) is waited for, up to that longest timeout; one that
// has stopped answering is given up on after ReadBound.
type Liveness interface {
	// ReadBound is how long a read waits for a lookup before it asks
	// whether the store still answers.
	ReadBound() time.Duration
	// AnsweredSince reports whether a call of this store got the
	// server's answer after t.
	AnsweredSince(t time.Time) bool
}

var _ Liveness = (*Redis)(nil)

// monoStart anchors the store's answer times on the monotonic clock.
var monoStart = time.Now()

// answers records when the server last answered a call.
type answers struct {
	last atomic.Int64 // since monoStart, nanoseconds
}

// answered records an answer now.
func (a *answers) answered() { a.last.Store(int64(time.Since(monoStart))) }

// since reports whether an answer came after t.
func (a *answers) since(t time.Time) bool { return a.last.Load() > int64(t.Sub(monoStart)) }

// ReadBound implements Liveness: the per-call timeout of a read's lookup,
// which follows the store's measured round trips between Timeout and
// MaxTimeout.
func (r *Redis) ReadBound() time.Duration { return r.rtt.timeout(r.timeout, r.maxTimeout) }

// AnsweredSince implements Liveness: a lookup, a raise or a verification
// got the server's answer after t.
func (r *Redis) AnsweredSince(t time.Time) bool { return r.alive.since(t) }
