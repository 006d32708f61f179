package lsnstore

import (
	"strings"
	"time"
)

// Adopter is implemented by Verifiers (RedisReader) whose reader may take
// the token another reader of the same store verified, instead of
// verifying the store itself: the shared poller's holder publishes the
// token its poll verified with its snapshot, and a follower adopts it
// (docs/design/topology.md, "What a follower asks of the store").
//
// Adopting is as safe as verifying: a token names the store's data as a
// Verify left it, so a read that finds another anchor refuses, as after
// any Verify; and the reader, after adopting a token other than its own,
// takes the primary's position read after it read the token as its loss
// floor, which is past every write the store lost before the token was
// written. What only the reader's own Verify can tell is kept to it:
// which server its own client reaches.
type Adopter interface {
	// Adoptable returns the Epoch of token as Verify would have found it
	// (Changed when it is not the accepted one), or false when the reader
	// must verify itself: nothing accepted yet, its client replaced
	// connections or failed on the network since its accepted Verify
	// (it may reach another server than the one the token names), token
	// names another server (run_id) than the accepted one, or a renewal
	// of its lease or a check of the store's format is due (only Verify
	// does them).
	Adoptable(token string) (Epoch, bool)
}

var _ Adopter = (*RedisReader)(nil)

// Adoptable implements Adopter.
func (rr *RedisReader) Adoptable(token string) (Epoch, bool) {
	acc := rr.accepted.Load()
	if acc == nil || token == "" || rr.watch == nil || rr.suspect() || rr.leaseDue(time.Now()) {
		return Epoch{}, false
	}
	if due := rr.format.due.Load(); due == 0 || time.Now().UnixNano() >= due {
		return Epoch{}, false
	}
	run, rest, ok := strings.Cut(token, ":")
	accRun, _, _ := strings.Cut(*acc, ":")
	if !ok || run != accRun || !strings.Contains(rest, ":") {
		return Epoch{}, false
	}
	return Epoch{Token: token, Changed: token != *acc, suspect: rr.acceptedS.Load()}, true
}

// leaseDue reports whether the next Verify renews the lease, by the rule
// leaseCall applies (leaseState.dueLocked).
func (rr *RedisReader) leaseDue(now time.Time) bool {
	ttl := time.Duration(rr.lease.ttl.Load())
	if ttl == 0 || rr.lease.held.Load() > 0 {
		return false
	}
	ls := &rr.lease
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.dueLocked(now, ttl)
}
