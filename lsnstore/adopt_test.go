package lsnstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRedisAdoptToken: a reader (a follower, its own client) adopts the
// token another reader of the store verified (the poller's holder):
// the same token changes nothing, a new one is a change (the follower
// then floors its reads), and its reads trust the store as after its own
// Verify. A token of another server, a reader that accepted nothing, and
// a reader whose lease renewal is due verify themselves; a stale token
// adopted by mistake only makes reads refuse.
func TestRedisAdoptToken(t *testing.T) {
	r, rdb := redisClient(t)
	db := uniqueDB("adopt")
	holder := reader(newTestRedis(rdb, RedisOptions{Database: db}))
	rdb2 := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb2.Close() })
	follower := reader(newTestRedis(rdb2, RedisOptions{Database: db}))

	tok1 := acceptNew(t, holder).Token
	if _, ok := follower.Adoptable(tok1); ok {
		t.Fatal("a reader that accepted nothing adopted a token: it must verify itself first")
	}
	acceptNew(t, follower)
	raiseOK(t, holder, []string{"t"}, 7)

	e, ok := follower.Adoptable(tok1)
	if !ok || e.Changed || e.Token != tok1 {
		t.Fatalf("the accepted token: %+v, %v; want adoptable, unchanged", e, ok)
	}
	follower.Accept(e)
	checkWrite(t, follower, []string{"t"}, 7)

	// Another reader could not publish: the anchor goes, the holder's
	// Verify writes a new one.
	if err := holder.Invalidate(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantDiscontinuity(t, follower, "after Invalidate, before the holder verified")
	tok2 := acceptNew(t, holder).Token
	wantDiscontinuity(t, follower, "the holder verified, the follower has not adopted")
	e, ok = follower.Adoptable(tok2)
	if !ok || !e.Changed || e.Token != tok2 {
		t.Fatalf("the holder's new token: %+v, %v; want adoptable, changed", e, ok)
	}
	follower.Accept(e)
	checkWrite(t, follower, []string{"t"}, 7)

	// A stale token (the holder's last but one) adopted by mistake: the
	// follower's reads refuse, and it verifies itself again.
	e, ok = follower.Adoptable(tok1)
	if !ok || !e.Changed {
		t.Fatalf("a stale token of the same server: %+v, %v; want adoptable as a change", e, ok)
	}
	follower.Accept(e)
	wantDiscontinuity(t, follower, "a stale token adopted")
	if ev, err := follower.Verify(context.Background()); err != nil || !ev.Changed || ev.Token != tok2 {
		t.Fatalf("the follower's own Verify: %+v, %v; want the holder's token, changed", ev, err)
	} else {
		follower.Accept(ev)
	}
	checkWrite(t, follower, []string{"t"}, 7)

	// A token of another server (run_id): verify.
	if _, ok := follower.Adoptable("0123456789abcdef0123456789abcdef01234567:0:00"); ok {
		t.Fatal("a token of another server was adoptable")
	}
	// A lease due for renewal: only Verify renews it.
	follower.SetLease(5 * time.Second)
	if _, ok := follower.Adoptable(tok2); ok {
		t.Fatal("adoptable with the lease due for renewal")
	}
	wantContinuous(t, follower, "renewing the lease")
	if _, ok := follower.Adoptable(tok2); !ok {
		t.Fatal("not adoptable with a lease just renewed")
	}
}

// TestRedisReadsCarryTheSnapshot: with CarrySnapshot on, a read's MGET
// (plain, and the eviction-guarded script) also returns the shared
// poller's snapshot, and the positions are unchanged; a new snapshot
// gets a new sequence number, the same one none; a missing one is "".
func TestRedisReadsCarryTheSnapshot(t *testing.T) {
	_, rdb := redisClient(t)
	s := verified(t, rdb)
	raiseOK(t, s, []string{"t"}, 5)
	ctx := context.Background()
	for _, guard := range []bool{false, true} {
		s.GuardEvictions(guard)
		s.CarrySnapshot(true)
		checkWrite(t, s, []string{"t"}, 5)
		if snap, seq := s.CarriedSnapshot(); snap != "" || seq == 0 {
			t.Fatalf("guard %v, no snapshot published: carried %q (%d), want \"\" and a number", guard, snap, seq)
		}
		_, seq0 := s.CarriedSnapshot()
		if _, err := s.PublishPoll(ctx, "holder", time.Second, []byte(`{"v":1}`), time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := s.WritePositions(ctx, [][]string{{"t"}, {"u"}}); err != nil {
			t.Fatal(err)
		}
		snap, seq := s.CarriedSnapshot()
		if snap != `{"v":1}` || seq == seq0 {
			t.Fatalf("guard %v: carried %q (%d after %d), want the snapshot with a new number", guard, snap, seq, seq0)
		}
		checkWrite(t, s, []string{"t"}, 5)
		if _, again := s.CarriedSnapshot(); again != seq {
			t.Fatalf("guard %v: the same snapshot carried again changed the number %d to %d", guard, seq, again)
		}
		if err := s.ResignPoller(ctx, "holder"); err != nil {
			t.Fatal(err)
		}
	}
	s.CarrySnapshot(false)
	if _, err := s.PublishPoll(ctx, "holder", time.Second, []byte(`{"v":2}`), time.Second); err != nil {
		t.Fatal(err)
	}
	checkWrite(t, s, []string{"t"}, 5)
	if snap, _ := s.CarriedSnapshot(); snap == `{"v":2}` {
		t.Fatal("a read carried the snapshot with carrying off")
	}
}
