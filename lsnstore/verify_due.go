package lsnstore

import "time"

// VerifyScheduler is implemented by Verifiers that can tell their reader
// when a Verify is needed, so that a reader that does not poll the store
// for its own sake (a follower of the shared poll) need not call it at
// every poll. Between Verifies every read still checks the anchor in its
// own round trip, and whoever verifies (the shared poll's holder, every
// poll) rewrites the anchor on a loss, so a reader that skips a Verify
// misses no discontinuity: its reads refuse, and VerifyDue then says so.
type VerifyScheduler interface {
	// VerifyDue reports whether the reader must Verify now: it has
	// accepted nothing yet, a read refused the store since the accepted
	// Verify began (the anchor changed or is gone), the client's
	// connections are suspect since then, or the reader's lease is due
	// for renewal.
	VerifyDue() bool
}

var _ VerifyScheduler = (*RedisReader)(nil)

// VerifyDue implements VerifyScheduler.
func (rr *RedisReader) VerifyDue() bool {
	if rr.accepted.Load() == nil || rr.refused.Load() != rr.acceptedR.Load() || rr.suspect() {
		return true
	}
	return rr.renewalDue(time.Now())
}

// renewalDue reports whether a Verify sent now would renew the lease
// (leaseCall): a lease is held, renewals are not on hold, and less than
// three quarters of it are left.
func (rr *RedisReader) renewalDue(now time.Time) bool {
	ttl := time.Duration(rr.lease.ttl.Load())
	if ttl == 0 || rr.lease.held.Load() > 0 {
		return false
	}
	rr.lease.mu.Lock()
	defer rr.lease.mu.Unlock()
	return rr.lease.until.Sub(now) <= ttl*3/4
}
