package plugin

import (
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// How often a follower of the shared poll verifies the store (docs/design/
// topology.md, "What a follower asks of the store"). The holder polls the
// servers and verifies the store every PollInterval; a follower reads the
// holder's snapshot at each of its polls, but verifies the store itself
// only when the reader says a verification is due (lsnstore.
// VerifyScheduler: nothing accepted yet, a read refused the store since,
// suspect connections, the writer lease's renewal), when the last one
// failed or the store's breaker is open, and at least every
// followerVerifyEvery. A loss between two of its verifications is not
// missed: every read checks the anchor, which the holder's verification
// (every poll) rewrites on a loss and which expires with a lapsed lease;
// the read refuses, and the next poll verifies.

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
