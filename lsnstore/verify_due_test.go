package lsnstore

import (
	"context"
	"testing"
	"time"
)

// TestRedisVerifyDue: a reader says a Verify is due before it accepted
// anything, after a read refused the store (another process invalidated
// it; the holder's Verify would have rewritten the anchor) until a Verify
// begun after that read is accepted, and when its lease is due for
// renewal; otherwise it is not, and reads go on. A follower of the shared
// poll verifies only then (plugin), so a VerifyDue that stayed false after
// a refused read would leave its reads on the primary.
func TestRedisVerifyDue(t *testing.T) {
	_, rdb := redisClient(t)
	store := newTestRedis(rdb, RedisOptions{Database: uniqueDB("verifydue")})
	ctx := context.Background()
	rr := reader(store)
	if !rr.VerifyDue() {
		t.Fatal("VerifyDue false before anything was accepted")
	}
	acceptNew(t, rr)
	if rr.VerifyDue() {
		t.Fatal("VerifyDue true right after an accepted Verify, without a lease")
	}
	raiseOK(t, store, []string{"t"}, 7)
	checkWrite(t, rr, []string{"t"}, 7)
	if rr.VerifyDue() {
		t.Fatal("VerifyDue true after a read that trusted the store")
	}

	if err := store.Invalidate(ctx); err != nil { // another process's
		t.Fatal(err)
	}
	if rr.VerifyDue() {
		t.Fatal("VerifyDue true before any read saw the change")
	}
	wantDiscontinuity(t, rr, "after another process invalidated the store")
	if !rr.VerifyDue() {
		t.Fatal("VerifyDue false after a read refused the store")
	}
	e, err := rr.Verify(ctx)
	if err != nil || !e.Changed {
		t.Fatalf("Verify after the invalidation: %+v, %v; want Changed", e, err)
	}
	if !rr.VerifyDue() {
		t.Fatal("VerifyDue false before the Verify was accepted")
	}
	rr.Accept(e)
	if rr.VerifyDue() {
		t.Fatal("VerifyDue true after the change was accepted")
	}
	checkWrite(t, rr, []string{"t"}, 7)

	// A read refused between the start of a Verify and its Accept keeps
	// it due: that Verify may have read the anchor before the change.
	e, err = rr.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rr.refused.Add(1) // a read refused meanwhile
	rr.Accept(e)
	if !rr.VerifyDue() {
		t.Fatal("VerifyDue false after a read refused during the accepted Verify")
	}
	verifyAccept(t, rr)

	const ttl = 4 * time.Second
	rr.SetLease(ttl)
	if !rr.VerifyDue() {
		t.Fatal("VerifyDue false with a lease not taken yet")
	}
	verifyAccept(t, rr)
	if rr.LeaseUntil().IsZero() || rr.VerifyDue() {
		t.Fatalf("after the lease was taken: until %v, VerifyDue %v; want a lease and false", rr.LeaseUntil(), rr.VerifyDue())
	}
	rr.lease.mu.Lock()
	rr.lease.until = time.Now().Add(ttl / 2) // half of it left
	rr.lease.mu.Unlock()
	if !rr.VerifyDue() {
		t.Fatal("VerifyDue false with half the lease left")
	}
	rr.HoldRenewal(true)
	if rr.VerifyDue() {
		t.Fatal("VerifyDue true while renewals are held")
	}
	rr.HoldRenewal(false)
}

// verifyAccept verifies rr and accepts what it found, changed or not.
func verifyAccept(t *testing.T, rr *RedisReader) {
	t.Helper()
	e, err := rr.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rr.Accept(e)
}
