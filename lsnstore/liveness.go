package lsnstore

import "time"

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

// ReadBound implements Liveness: the per-call timeout of a read's lookup,
// which follows the store's measured round trips between Timeout and
// MaxTimeout.
func (r *Redis) ReadBound() time.Duration { return r.rtt.timeout(r.timeout, r.maxTimeout) }

// AnsweredSince implements Liveness: a lookup, a raise or a verification
// got the server's answer after t.
func (r *Redis) AnsweredSince(t time.Time) bool { return r.alive.Since(t) }
