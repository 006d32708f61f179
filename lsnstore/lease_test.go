package lsnstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// leased returns a verified reader of store holding a lease of ttl.
func leased(t *testing.T, store *Redis, ttl time.Duration) *RedisReader {
	t.Helper()
	s := reader(store)
	s.SetLease(ttl)
	acceptNew(t, s)
	if s.LeaseUntil().IsZero() {
		t.Fatal("a reader with a lease verified without renewing it")
	}
	return s
}

// TestRedisLeaseLapseIsADiscontinuity: a reader that stops renewing its
// lease (a process cut off from the store, paused, or dead) makes the
// anchor expire at its lease's end: every other reader's next read
// refuses in its own round trip, without any Verify, and their next
// Verify reports a change. Before the lease's end they read on. Without
// this, a writer cut off from Redis that could neither publish nor
// invalidate left the others reading its write stale.
func TestRedisLeaseLapseIsADiscontinuity(t *testing.T) {
	_, rdb := redisClient(t)
	store := newTestRedis(rdb, RedisOptions{Database: uniqueDB("lease")})
	const ttl = 600 * time.Millisecond
	cut := leased(t, store, ttl)   // never verifies again: cut off
	other := leased(t, store, ttl) // keeps renewing
	raiseOK(t, store, []string{"t"}, 7)
	checkWrite(t, other, []string{"t"}, 7)
	if !time.Now().Before(cut.LeaseUntil()) {
		t.Fatal("the lease ended at once")
	}
	gone := cut.LeaseGone()
	for time.Now().Before(gone) {
		// The other reader keeps its own lease; the cut one's bounds
		// the anchor.
		if err := other.RenewLease(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	wantDiscontinuity(t, other, "after another reader's lease lapsed")
	e, err := other.Verify(context.Background())
	if err != nil || !e.Changed {
		t.Fatalf("Verify after a lapse: %+v, %v; want Changed", e, err)
	}
	other.Accept(e)
	checkWrite(t, other, []string{"t"}, 7) // positions are kept
	// The lapsed lease is gone from the set: the new anchor lives on
	// while the other reader verifies, as its poller does.
	for end := time.Now().Add(2 * ttl); time.Now().Before(end); {
		wantContinuous(t, other, "the lapsed reader dropped")
		time.Sleep(20 * time.Millisecond)
	}
	// The cut reader, back, renews and sees the change too.
	e, err = cut.Verify(context.Background())
	if err != nil || !e.Changed {
		t.Fatalf("the lapsed reader's own Verify: %+v, %v; want Changed", e, err)
	}
}

// TestRedisLeaseRelease: a reader that gives its lease up (a process
// closing) does not end the anchor.
func TestRedisLeaseRelease(t *testing.T) {
	_, rdb := redisClient(t)
	store := newTestRedis(rdb, RedisOptions{Database: uniqueDB("lease")})
	const ttl = 400 * time.Millisecond
	closing := leased(t, store, ttl)
	other := leased(t, store, time.Minute)
	if err := closing.ReleaseLease(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := other.RenewLease(context.Background()); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(2 * ttl); time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
		checkWrite(t, other, []string{"t"}, 0)
	}
	wantContinuous(t, other, "a released lease")
}

// TestRedisLateRenewalRefused: a renewal that reaches the server after
// the time its sender can bound (stuck in the network) does not extend
// the lease: the lease still ends when its holder computed.
func TestRedisLateRenewalRefused(t *testing.T) {
	_, rdb := redisClient(t)
	store := newTestRedis(rdb, RedisOptions{Database: uniqueDB("lease")})
	s := leased(t, store, time.Second)
	ctx := context.Background()
	before, err := rdb.ZScore(ctx, store.leasesKey(), s.currentMember()).Result()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	// A renewal whose deadline (server milliseconds) has passed.
	v, err := anchorScript.Run(ctx, rdb, []string{store.anchorKey, store.leasesKey(), store.lapsedKey()}, "00", s.currentMember(), "1000", "1", "3600000").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, renewed, err := anchorReply(v); err != nil || renewed == 1 {
		t.Fatalf("a late renewal: renewed=%v, %v", renewed, err)
	}
	after, err := rdb.ZScore(ctx, store.leasesKey(), s.currentMember()).Result()
	if err != nil || after != before {
		t.Fatalf("a late renewal moved the lease's end from %v to %v (%v)", before, after, err)
	}
	// One in time does.
	if err := s.RenewLease(ctx); err != nil {
		t.Fatal(err)
	}
	if after, _ := rdb.ZScore(ctx, store.leasesKey(), s.currentMember()).Result(); after <= before {
		t.Fatalf("a renewal in time left the lease's end at %v", after)
	}
	// The anchor expires with the earliest lease.
	pttl, err := rdb.PTTL(ctx, store.anchorKey).Result()
	if err != nil || pttl <= 0 || pttl > time.Second {
		t.Fatalf("the anchor's TTL is %v (%v), want at most the lease", pttl, err)
	}
}

// TestRedisLeaseReleaseAlone: a release recomputes the anchor's expiry
// itself, without waiting for another reader's renewal (a resting or
// closing process while every other one rests): the anchor lives on with
// the leases left, and for good once none is left.
func TestRedisLeaseReleaseAlone(t *testing.T) {
	_, rdb := redisClient(t)
	store := newTestRedis(rdb, RedisOptions{Database: uniqueDB("lease")})
	const ttl = 300 * time.Millisecond
	first := leased(t, store, ttl)
	second := leased(t, store, 4*ttl)
	if err := first.ReleaseLease(context.Background()); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(2 * ttl); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		wantContinuous(t, second, "the other lease released, this one not renewed")
	}
	if err := second.ReleaseLease(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := rdb.PTTL(context.Background(), store.anchorKey).Val(); d != -1 {
		t.Fatalf("the anchor's TTL with no lease left is %v, want none (-1)", d)
	}
	for end := time.Now().Add(5 * ttl); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		wantContinuous(t, second, "every lease released")
	}
}

// TestRedisLapsedMemberNeverReturns: once the store removed a lapsed
// member, it lists it as lapsed (its tag among LapsedLeaseTags), and
// nothing brings it back: neither a renewal of it that arrives late (with
// a deadline not yet passed), nor its holder's next renewal, which creates
// a member of a new name, with a new tag. The other processes end the
// connections tagged with a lapsed member (plugin's writer fence); were
// the member to come back, its process would tag connections that those
// processes end. A member lost with the store's data is not listed as
// lapsed, and its holder learns at its next renewal that it holds none.
func TestRedisLapsedMemberNeverReturns(t *testing.T) {
	_, rdb := redisClient(t)
	store := newTestRedis(rdb, RedisOptions{Database: uniqueDB("lease")})
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	lapsing := leased(t, store, ttl)
	other := leased(t, store, time.Minute)
	old := lapsing.currentMember()
	ns, oldTag := lapsing.LeaseTag()
	if lapsed := lapsedTags(t, other); len(lapsed) != 0 {
		t.Fatalf("lapsed tags %v before any lease lapsed", lapsed)
	}
	time.Sleep(time.Until(lapsing.LeaseGone()))
	e, err := other.Verify(ctx)
	if err != nil || !e.Changed {
		t.Fatalf("Verify after a lapse: %+v, %v; want Changed", e, err)
	}
	if lapsed := lapsedTags(t, other); !lapsed[oldTag] {
		t.Fatalf("the lapsed member's tag %d is not listed as lapsed: %v", oldTag, lapsed)
	}
	// A renewal of the removed member, in time by its deadline.
	keys := []string{store.anchorKey, store.leasesKey(), store.lapsedKey()}
	_, serverNow, _, err := anchorReply(mustSlice(t, anchorScript.Run(ctx, rdb, keys, "00", "probe", "0", "0", "3600000")))
	if err != nil {
		t.Fatal(err)
	}
	v := mustSlice(t, anchorScript.Run(ctx, rdb, keys, "01", old, "1000", fmt.Sprint(serverNow+60_000), "3600000"))
	if _, _, renewed, err := anchorReply(v); err != nil || renewed != -1 {
		t.Fatalf("a late renewal of a removed member: renewed=%v, %v; want -1", renewed, err)
	}
	if err := rdb.ZScore(ctx, store.leasesKey(), old).Err(); err == nil {
		t.Fatal("a late renewal brought a removed member back")
	}
	// Its holder's next renewal creates another member.
	if err := lapsing.RenewLease(ctx); err != nil {
		t.Fatal(err)
	}
	if lapsing.LeaseUntil().IsZero() || !time.Now().Before(lapsing.LeaseUntil()) {
		t.Fatal("the renewal after the lapse holds no lease")
	}
	if now := lapsing.currentMember(); now == old {
		t.Fatalf("the renewal after the lapse kept the member %q", old)
	}
	ns2, newTag := lapsing.LeaseTag()
	if ns2 != ns || newTag == oldTag {
		t.Fatalf("tags after the lapse: (%d, %d), before (%d, %d)", ns2, newTag, ns, oldTag)
	}
	if lapsed := lapsedTags(t, other); lapsed[newTag] {
		t.Fatalf("the new member's tag %d is listed as lapsed", newTag)
	}

	// The leases lost with the data (FLUSHALL, a restart): not lapsed.
	if err := rdb.Del(ctx, store.leasesKey(), store.lapsedKey(), store.anchorKey).Err(); err != nil {
		t.Fatal(err)
	}
	// A renewal now (asked for, not due) learns the member is gone.
	if err := other.RenewLease(ctx); err != nil {
		t.Fatal(err)
	}
	if !other.LeaseUntil().IsZero() {
		t.Fatal("a reader whose member was lost with the data still counts on its lease")
	}
	if err := other.RenewLease(ctx); err != nil || other.LeaseUntil().IsZero() {
		t.Fatalf("the next renewal holds no lease (%v)", err)
	}
	if lapsed := lapsedTags(t, other); len(lapsed) != 0 {
		t.Fatalf("members lost with the data listed as lapsed: %v", lapsed)
	}
}

// lapsedTags returns the store's lapsed lease tags, as a set.
func lapsedTags(t *testing.T, rr *RedisReader) map[uint32]bool {
	t.Helper()
	tags, err := rr.LapsedLeaseTags(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	set := make(map[uint32]bool, len(tags))
	for _, tag := range tags {
		set[tag] = true
	}
	return set
}

// mustSlice is a script's reply, or the test's end.
func mustSlice(t *testing.T, c *redis.Cmd) []any {
	t.Helper()
	v, err := c.Slice()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
