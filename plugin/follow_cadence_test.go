package plugin

import (
	"context"
	"testing"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// verifyingSnapshotStore is a snapshotStore that verifies (counting its
// Verifies) and says when a Verify is due.
type verifyingSnapshotStore struct {
	*snapshotStore
	verifies int
	due      bool
}

func (s *verifyingSnapshotStore) Verify(context.Context) (lsnstore.Epoch, error) {
	s.verifies++
	return lsnstore.Epoch{Token: "t"}, nil
}
func (s *verifyingSnapshotStore) Accept(lsnstore.Epoch) {}
func (s *verifyingSnapshotStore) VerifyDue() bool       { return s.due }

// TestFollowerVerifiesOnlyWhenDue: a follower of the shared poll verifies
// the store only when the reader says a verification is due, after a
// failed one, or every followerVerifyEvery. Every follower verifying at
// every poll was most of what made the store's load grow with the fleet.
func TestFollowerVerifiesOnlyWhenDue(t *testing.T) {
	f := newFollower(t, bufferedConnector{})
	store := &verifyingSnapshotStore{snapshotStore: f.store}
	p := f.p
	p.cfg.Store = store
	f.setSnapshot(true)
	ctx := context.Background()
	follow := func(wantVerifies int, what string) {
		t.Helper()
		if !p.followOnce(ctx, f.sp) {
			t.Fatalf("%s: followOnce did not take the snapshot", what)
		}
		if store.verifies != wantVerifies {
			t.Fatalf("%s: %d Verifies, want %d", what, store.verifies, wantVerifies)
		}
	}
	follow(1, "the first follow") // nothing verified yet
	follow(1, "a follow with no Verify due")
	store.due = true
	follow(2, "a follow with a Verify due")
	store.due = false
	p.followVerifiedAt = time.Now().Add(-followerVerifyEvery)
	follow(3, "a follow a followerVerifyEvery after the last Verify")
	p.verifyFailing = true
	follow(4, "a follow after a failed Verify")
	p.verifyFailing = false
	p.breaker.Failure(time.Now(), 1)
	follow(5, "a follow with the store's breaker open")
}
