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
