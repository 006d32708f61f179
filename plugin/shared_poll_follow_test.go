package plugin

import (
	"context"
	"testing"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// getterSnapshotStore is a snapshotStore that reads the snapshot alone
// too (lsnstore.SnapshotGetter), counting each way.
type getterSnapshotStore struct {
	*snapshotStore
	gets, polls int
}

func (s *getterSnapshotStore) GetSharedPoll(ctx context.Context) ([]byte, error) {
	s.gets++
	b, _, err := s.snapshotStore.SharedPoll(ctx)
	return b, err
}

func (s *getterSnapshotStore) SharedPoll(ctx context.Context) ([]byte, time.Duration, error) {
	s.polls++
	return s.snapshotStore.SharedPoll(ctx)
}

// TestFollowerReadsTheSnapshotAlone: with MaxLag at least
// snapshotAgeFactor times PollerLease, a follower reads the snapshot with
// one GET and takes it as published a whole lifetime ago (its replicas'
// states as polled before then); with a shorter MaxLag it reads its age
// (PTTL), which the states then carry.
func TestFollowerReadsTheSnapshotAlone(t *testing.T) {
	f := newFollower(t, bufferedConnector{})
	store := &getterSnapshotStore{snapshotStore: f.store}
	p := f.p
	p.cfg.Store = store
	p.cfg.PollerLease = time.Second
	sp, _ := p.sharedPoller()
	f.setSnapshot(true) // TTL 1 s; the fake store says 900 ms left
	ctx := context.Background()

	before := time.Now()
	if !p.followOnce(ctx, sp) {
		t.Fatal("followOnce did not take the snapshot")
	}
	if store.gets != 1 || store.polls != 0 {
		t.Fatalf("%d GETs and %d scripts for one follow with MaxLag %v, want the GET alone", store.gets, store.polls, p.cfg.MaxLag)
	}
	if st := f.r.state.Load(); !st.polledAt.Before(before.Add(-time.Second)) || !st.up {
		t.Fatalf("state %+v: polled at %v, want up and before %v (a whole lifetime before the follow)", st, st.polledAt, before.Add(-time.Second))
	}

	p.cfg.MaxLag = snapshotAgeFactor*p.cfg.PollerLease - time.Millisecond
	before = time.Now()
	if !p.followOnce(ctx, sp) {
		t.Fatal("followOnce did not take the snapshot")
	}
	if store.gets != 1 || store.polls != 1 {
		t.Fatalf("%d GETs and %d scripts after a follow with MaxLag %v, want one script", store.gets, store.polls, p.cfg.MaxLag)
	}
	after := time.Now()
	// 900 ms left of 1 s: published 100 ms before the follow.
	if st := f.r.state.Load(); st.polledAt.Before(before.Add(-100*time.Millisecond)) || st.polledAt.After(after.Add(-100*time.Millisecond)) {
		t.Fatalf("polled at %v with its age read, want 100 ms before the follow (%v to %v)", st.polledAt, before, after)
	}
}

// TestFollowerKeepsThePrimarysHistory: a follower keeps the primary's
// positions its snapshots carried, as a poll keeps its own, so that if it
// takes the poller's lease over it judges replicas against MaxLag from
// that history: a young holder with no history takes its first poll's
// position as the threshold, and every replica paused behind it as
// outside MaxLag (no replica usable for a minute after a takeover).
func TestFollowerKeepsThePrimarysHistory(t *testing.T) {
	f := newFollower(t, bufferedConnector{})
	ctx := context.Background()
	f.setSnapshot(true) // primary at 0x6000
	if !f.p.followOnce(ctx, f.sp) {
		t.Fatal("followOnce did not take the snapshot")
	}
	if len(f.p.samples) != 1 || !f.p.samples[0].pos.Equal(lsnstore.PositionOf(0x6000)) || f.p.samples[0].at.After(time.Now()) {
		t.Fatalf("samples after one follow: %+v, want the snapshot's primary position", f.p.samples)
	}
	f.p.cfg.MaxLag = time.Millisecond
	time.Sleep(5 * time.Millisecond)
	f.p.followOnce(ctx, f.sp)
	if len(f.p.samples) > 2 {
		t.Fatalf("%d samples kept with MaxLag 1 ms, want the ones MaxLag needs", len(f.p.samples))
	}
}
