package plugin

import (
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// How often a follower of the shared poll asks the store (docs/design/
// reliability.md, "What a follower asks of the store"). The holder polls
// the servers and verifies the store every PollInterval; a follower's own
// asking is what grows with the fleet, so it asks only when it has a use
// for the answer:
//
//   - the holder's snapshot, at a poll after a read or a write came (the
//     next reads route on it), while a read waits for a replica to catch
//     up (MaxWait), while a write's position waits to be published, when
//     its dependency graph is due to be relearned, and at least every
//     followQuietRefresh while awake; a snapshot not read only ages, and
//     an older replay position only makes fewer replicas eligible;
//   - its own Verify, when the reader says one is due
//     (lsnstore.VerifyScheduler: nothing accepted yet, a read refused the
//     store since, suspect connections, the writer lease's renewal), when
//     the last one failed or the store's breaker is open, and at least
//     every followerVerifyEvery. A loss between two of its Verifies is
//     not missed: every read checks the anchor, which the holder's Verify
//     (every poll) rewrites on a loss and which expires with a lapsed
//     lease; the read refuses, and the next poll verifies.

// followQuietRefresh is the longest a follower with no reads or writes
// goes without reading the shared poll's snapshot while awake: the
// snapshot's default lifetime (PollerLease).
const followQuietRefresh = time.Second

// followerVerifyEvery is the longest a follower goes without its own
// Verify when none is due. Longer than the default lease's renewals
// (WriterLease/4, 1.25 s), which verify anyway: with a lease it adds no
// Verify of its own; without one it bounds how long a follower goes
// without looking at the store's continuity itself.
const followerVerifyEvery = 2 * time.Second

// followerVerifyDue reports whether a follower's poll at now verifies the
// store.
func (p *Plugin) followerVerifyDue(now time.Time) bool {
	vs, ok := p.cfg.Store.(lsnstore.VerifyScheduler)
	if !ok || !p.verifiedOnce || p.verifyFailing || p.breaker.Open() || now.Sub(p.followVerifiedAt) >= followerVerifyEvery {
		return true
	}
	return vs.VerifyDue()
}

// followQuiet reports whether a follower's poll at now may skip the
// snapshot: nothing came or waits that would use it (see above).
func (p *Plugin) followQuiet(now time.Time) bool {
	if p.followedAt.IsZero() || now.Sub(p.followedAt) >= followQuietRefresh {
		return false
	}
	if p.followWanted.Load() || p.waitingReads.Load() > 0 || p.pending.suspect.Load() || p.staleDue(now) {
		return false
	}
	return !p.followerVerifyDue(now)
}
