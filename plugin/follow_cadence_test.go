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

// TestFollowerAsksTheStoreOnlyWhenItHasAUse: a follower of the shared poll
// reads the snapshot at a poll only after a read or write came, while one
// waits, or every followQuietRefresh; it verifies the store only when the
// reader says it is due, after a failed one, or every followerVerifyEvery.
// Every follower asking at every poll is what made the store's load grow
// with the fleet.
func TestFollowerAsksTheStoreOnlyWhenItHasAUse(t *testing.T) {
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

	now := time.Now()
	p.followedAt = now
	if !p.followQuiet(now) {
		t.Fatal("a follower with nothing to do reads the snapshot at every poll")
	}
	p.demand(false)
	if p.followQuiet(time.Now()) {
		t.Fatal("a follower skipped the snapshot after a read came")
	}
	follow(4, "the follow after the read")
	if !p.followQuiet(time.Now()) {
		t.Fatal("a follower read the snapshot again with no read since the last one")
	}
	now = p.followedAt
	if p.followQuiet(now.Add(followQuietRefresh)) {
		t.Fatal("a follower skipped the snapshot for longer than followQuietRefresh")
	}
	p.waitingReads.Add(1)
	if p.followQuiet(now) {
		t.Fatal("a follower skipped the snapshot while a read waits for a replica")
	}
	p.waitingReads.Add(-1)
	store.due = true
	if p.followQuiet(now) {
		t.Fatal("a follower skipped its poll with a Verify due")
	}
}
