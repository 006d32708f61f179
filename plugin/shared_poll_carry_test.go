package plugin

import (
	"context"
	"testing"
	"time"
)

// carrierStore is a snapshotStore whose reads carry the snapshot
// (lsnstore.SnapshotCarrier), counting the follower's own reads of it.
type carrierStore struct {
	*snapshotStore
	carry bool
	snap  string
	seq   uint64
	polls int
}

func (s *carrierStore) SharedPoll(ctx context.Context) ([]byte, time.Duration, error) {
	s.polls++
	return s.snapshotStore.SharedPoll(ctx)
}

func (s *carrierStore) CarrySnapshot(on bool) { s.carry = on }

func (s *carrierStore) CarriedSnapshot() (string, uint64) { return s.snap, s.seq }

// carry makes the next read carry the snapshot store.snap holds now
// (missing: "").
func (s *carrierStore) carryNow(missing bool) {
	s.seq++
	s.snap = ""
	if !missing {
		s.snapshotStore.mu.Lock()
		s.snap = string(s.snapshotStore.snap)
		s.snapshotStore.mu.Unlock()
	}
}

// TestFollowerRoutesOnCarriedSnapshots: a follower's reads carry the
// holder's snapshot (its reads turn carrying on) and route on the newest
// one; its poll reads the snapshot itself only every followRefresh, or at
// once when a read found no snapshot (the holder gone), refused the store,
// or waits for a poll.
func TestFollowerRoutesOnCarriedSnapshots(t *testing.T) {
	f := newFollower(t, bufferedConnector{})
	p, r := f.p, f.r
	store := &carrierStore{snapshotStore: f.store}
	p.cfg.Store = store
	p.cfg.PollerLease = time.Second // MaxLag a minute: the age rule without PTTL
	p.followRefresh = time.Hour
	sp, _ := p.sharedPoller()
	ctx := context.Background()

	f.setSnapshot(true)
	if !p.followOnce(ctx, sp) || store.polls != 1 || !store.carry {
		t.Fatalf("first follow: %d reads of the snapshot, carrying %v; want 1, on", store.polls, store.carry)
	}
	if !r.state.Load().up {
		t.Fatal("the replica is not up after the first follow")
	}
	for range 3 {
		if !p.followOnce(ctx, sp) {
			t.Fatal("followOnce did not follow")
		}
	}
	if store.polls != 1 {
		t.Fatalf("%d reads of the snapshot by the poll within followRefresh, want 1", store.polls)
	}

	// A read carries a snapshot saying the replica is down: it routes on it.
	f.setSnapshot(false)
	store.carryNow(false)
	p.applyCarried()
	if r.state.Load().up {
		t.Fatal("a carried snapshot saying down left the replica up")
	}
	// The same one carried again changes nothing; a new one applies.
	r.state.Store(&replicaState{})
	p.applyCarried()
	if r.state.Load().polledAt != (time.Time{}) {
		t.Fatal("a snapshot already applied was applied again")
	}
	f.setSnapshot(true)
	store.carryNow(false)
	p.applyCarried()
	if !r.state.Load().up {
		t.Fatal("a carried snapshot saying up left the replica down")
	}
	if !p.followOnce(ctx, sp) || store.polls != 1 {
		t.Fatalf("%d reads of the snapshot by the poll, want 1 (reads carry it)", store.polls)
	}

	// No snapshot carried (the holder gone): the next poll reads it itself.
	store.carryNow(true)
	p.applyCarried()
	if !p.followOnce(ctx, sp) || store.polls != 2 {
		t.Fatalf("%d reads of the snapshot after a read found none, want 2", store.polls)
	}
	// A read waiting for a poll: the poll reads the snapshot.
	p.waitingPoll.Add(1)
	if !p.followOnce(ctx, sp) || store.polls != 3 {
		t.Fatalf("%d reads of the snapshot with a read waiting, want 3", store.polls)
	}
	p.waitingPoll.Add(-1)
	// This process holds the poller's lease: its own poll's states stand.
	p.leading.Store(true)
	f.setSnapshot(false)
	store.carryNow(false)
	p.applyCarried()
	if !r.state.Load().up {
		t.Fatal("the holder applied a carried snapshot over its own poll's states")
	}
}
