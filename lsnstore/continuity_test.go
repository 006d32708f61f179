package lsnstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/redis/go-redis/v9"
)

// verified returns a Redis store that has been verified and accepted once,
// as the plugin's is before its first read.
func verified(t *testing.T, rdb redis.UniversalClient) *RedisReader {
	t.Helper()
	s := reader(newTestRedis(rdb, RedisOptions{Database: uniqueDB("cont")}))
	acceptNew(t, s)
	return s
}

func reader(s *Redis) *RedisReader { return s.NewReader().(*RedisReader) }

// acceptNew verifies s, expects a changed epoch and accepts it; then
// verifies and accepts once more, as the plugin's next poll does, since
// the first connection to a server after the first Verify is suspect too.
func acceptNew(t *testing.T, s *RedisReader) Epoch {
	t.Helper()
	e, err := s.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !e.Changed {
		t.Fatalf("Verify after a loss: %+v, want Changed", e)
	}
	s.Accept(e)
	wantContinuous(t, s, "verified again")
	return e
}

// wantDiscontinuity checks that WritePosition refuses to answer.
func wantDiscontinuity(t *testing.T, s *RedisReader, what string) {
	t.Helper()
	_, err := s.WritePosition(context.Background(), []string{"t"})
	if !IsDiscontinuity(err) {
		t.Fatalf("%s: WritePosition error %v, want a discontinuity", what, err)
	}
	if !strings.HasPrefix(err.Error(), "lsnstore: ") {
		t.Fatalf("error %q lacks the package prefix", err)
	}
	t.Logf("%s: %v", what, err)
}

// wantContinuous checks that Verify finds nothing lost and accepts it.
func wantContinuous(t *testing.T, s *RedisReader, what string) {
	t.Helper()
	e, err := s.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if e.Changed {
		t.Fatalf("%s: Verify reports a change: %+v", what, e)
	}
	s.Accept(e)
}

// TestRedisVerifiedConformance: a verifying store keeps the Store
// semantics while nothing is lost, reading with a plain MGET and with the
// eviction-guarded script.
func TestRedisVerifiedConformance(t *testing.T) {
	_, rdb := redisClient(t)
	for _, guard := range []bool{false, true} {
		t.Run(fmt.Sprintf("guardEvictions=%v", guard), func(t *testing.T) {
			checkConformance(t, func(t *testing.T, db string) Store {
				s := reader(newTestRedis(rdb, RedisOptions{Database: uniqueDB(db)}))
				s.GuardEvictions(guard)
				acceptNew(t, s)
				return s
			})
		})
	}
}

func TestRedisVerifyBeforeAccept(t *testing.T) {
	_, rdb := redisClient(t)
	store := newTestRedis(rdb, RedisOptions{Database: uniqueDB("cont")})
	raiseOK(t, store, []string{"t"}, 5)
	checkWrite(t, store, []string{"t"}, 5) // the store itself does not verify
	s := reader(store)
	wantDiscontinuity(t, s, "never verified")
	e, err := s.Verify(context.Background())
	if err != nil || !e.Changed {
		t.Fatalf("first Verify: %+v, %v; want Changed", e, err)
	}
	wantDiscontinuity(t, s, "verified, not accepted")
	s.Accept(e)
	checkWrite(t, s, []string{"t"}, 5)
	wantContinuous(t, s, "nothing happened")
	checkWrite(t, s, nil, 5)
	// Another reader of the same store shares the anchor, not the
	// acceptance.
	other := reader(store)
	wantDiscontinuity(t, other, "another reader, never verified")
	if e2 := acceptNew(t, other); e2.Token != e.Token {
		t.Fatalf("two readers see different anchors: %q, %q", e.Token, e2.Token)
	}
}

// TestRedisFlushIsADiscontinuity: FLUSHDB (or FLUSHALL) drops the anchor
// with the positions: the next read says so, in its own round trip, for
// every reader; Verify makes a new anchor.
func TestRedisFlushIsADiscontinuity(t *testing.T) {
	r := testcluster.RedisFor(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), DB: 7, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	s := verified(t, rdb)
	other := reader(s.Redis)
	acceptNew(t, other)
	raiseOK(t, s, []string{"t"}, 9)
	if err := rdb.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	wantDiscontinuity(t, s, "after FLUSHDB")
	wantDiscontinuity(t, other, "after FLUSHDB, another reader")
	acceptNew(t, s)
	checkWrite(t, s, []string{"t"}, 0) // lost: the reader must be conservative
	wantDiscontinuity(t, other, "anchor replaced by another reader")
	acceptNew(t, other)
}

// TestRedisInvalidateIsADiscontinuity: a process that committed a write
// it could not publish invalidates the store; every reader, its own
// included, sees a discontinuity in its next read and a changed epoch at
// its next Verify, while the positions themselves are kept.
func TestRedisInvalidateIsADiscontinuity(t *testing.T) {
	_, rdb := redisClient(t)
	s := reader(newTestRedis(rdb, RedisOptions{Database: uniqueDB("inv")}))
	acceptNew(t, s)
	other := reader(s.Redis)
	acceptNew(t, other)
	raiseOK(t, s, []string{"t"}, 9)
	wantContinuous(t, other, "before Invalidate")
	if err := s.Invalidate(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantDiscontinuity(t, s, "after Invalidate, the invalidating reader")
	wantDiscontinuity(t, other, "after Invalidate, another reader")
	acceptNew(t, other) // Changed
	checkWrite(t, other, []string{"t"}, 9)
	wantDiscontinuity(t, s, "anchor replaced by another reader")
	acceptNew(t, s)
	wantContinuous(t, s, "accepted again")
}

// TestRedisRestartIsADiscontinuity: a server restarted without
// persistence comes back empty with a new run_id.
func TestRedisRestartIsADiscontinuity(t *testing.T) {
	r, rdb := redisClient(t)
	s := verified(t, rdb)
	raiseOK(t, s, []string{"t"}, 9)
	ctx := context.Background()
	restartRedis(t, r)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := s.WritePosition(ctx, []string{"t"})
		if IsDiscontinuity(err) {
			break
		}
		if err == nil {
			t.Fatal("WritePosition answers after a restart without persistence")
		}
		if time.Now().After(deadline) {
			t.Fatalf("WritePosition after restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	acceptNew(t, s)
	checkWrite(t, s, []string{"t"}, 0)
}

// TestRedisNetworkFailureChecksIdentity: after a command failed on a
// broken connection (here CLIENT KILL while it waits; a restart or a
// crash break them the same way), reads check the server's identity in
// their own round trip until Verify has looked at the server again; the
// same server answers them. A timeout is not a failure (a loaded server
// causes them), but the connection go-redis opens to replace the
// timed-out one is suspect the same way. (go-redis retries a command on a
// broken connection; only a failure that outlives the retries reaches
// the hook: a client without retries here.) Another server answering is
// TestRedisRestartWithPersistenceIsADiscontinuity.
func TestRedisNetworkFailureChecksIdentity(t *testing.T) {
	r := testcluster.RedisFor(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	s := verified(t, rdb)
	raiseOK(t, s, []string{"t"}, 4)
	checkWrite(t, s, []string{"t"}, 4)
	admin := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	defer admin.Close()
	ctx := context.Background()

	// A timeout: the server is paused, not gone.
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "200", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	_, err := s.WritePosition(short, []string{"t"})
	cancel()
	if err == nil || IsDiscontinuity(err) {
		t.Fatalf("WritePosition on a paused server: %v, want a timeout", err)
	}
	time.Sleep(250 * time.Millisecond)
	// go-redis drops a connection whose command timed out; the one that
	// replaces it (dialled by the first Verify) is suspect until the next
	// Verify, which finds the same server with the same data (no loss
	// floor), as the plugin's next poll does.
	wantContinuous(t, s, "after a timeout")
	wantContinuous(t, s, "after a timeout, the next poll")
	checkWrite(t, s, []string{"t"}, 4)

	// A broken connection: a command blocked on the server when its
	// connection is killed.
	errc := make(chan error, 1)
	go func() { errc <- rdb.BLPop(ctx, 5*time.Second, "cont-nothing").Err() }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		list, _ := admin.ClientList(ctx).Result()
		if strings.Contains(list, "cmd=blpop") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("BLPOP never reached the server")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil {
		t.Fatal("BLPOP survived CLIENT KILL")
	}
	if !s.suspect() {
		t.Fatal("a broken connection left the reader unsuspecting: the test tests nothing")
	}
	checkWrite(t, s, []string{"t"}, 4) // the server's identity checked in the read's round trip
	wantContinuous(t, s, "same server, same data")
	if s.suspect() {
		t.Fatal("still suspect after Verify accepted the same server")
	}
	checkWrite(t, s, []string{"t"}, 4)
}

// TestRedisEvictionIsADiscontinuity: under maxmemory with a volatile
// policy, position keys (which carry a TTL) can be evicted; the server's
// evicted_keys moves, and Verify reports a change.
func TestRedisEvictionIsADiscontinuity(t *testing.T) {
	_, rdb := redisClient(t)
	ctx := context.Background()
	s := verified(t, rdb) // guards evictions, as every new reader
	raiseOK(t, s, []string{"t"}, 4)
	// A reader told that the server does not evict reads with a plain MGET.
	plain := reader(s.Redis)
	plain.GuardEvictions(false)
	acceptNew(t, plain)
	used := func() int64 {
		info, _ := rdb.Info(ctx, "memory").Result()
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return 0
	}
	oldMax, _ := rdb.ConfigGet(ctx, "maxmemory").Result()
	oldPolicy, _ := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	t.Cleanup(func() {
		rdb.Do(ctx, "FLUSHDB")
		rdb.ConfigSet(ctx, "maxmemory", oldMax["maxmemory"])
		rdb.ConfigSet(ctx, "maxmemory-policy", oldPolicy["maxmemory-policy"])
	})
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "volatile-random").Err(); err != nil {
		t.Skipf("CONFIG SET not allowed: %v", err)
	}
	rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used()+(1<<20), 10))
	val := strings.Repeat("x", 4096)
	for i := 0; ; i++ {
		if err := rdb.Set(ctx, "evict-junk-"+strconv.Itoa(i), val, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		info, _ := rdb.Info(ctx, "stats").Result()
		if !strings.Contains(info, "evicted_keys:0\r") {
			break
		}
		if i > 100000 {
			t.Fatal("nothing evicted")
		}
	}
	// Before any Verify: the guarded read notices the eviction in its own
	// round trip; the plain MGET cannot (the window the guard closes).
	wantDiscontinuity(t, s, "a guarded read after an eviction, before any verification")
	if _, err := plain.WritePosition(ctx, []string{"t"}); err != nil {
		t.Fatalf("unguarded read after an eviction: %v (expected to trust the store until the next Verify)", err)
	}
	e, err := s.Verify(ctx)
	if err != nil || !e.Changed {
		t.Fatalf("Verify after an eviction: %+v, %v; want Changed", e, err)
	}
	wantDiscontinuity(t, s, "anchor replaced after an eviction")
	s.Accept(e)
	if _, err := s.WritePosition(ctx, []string{"t"}); err != nil && !IsDiscontinuity(err) {
		t.Fatalf("guarded read after accepting: %v", err)
	}
}

// TestRedisRestartWithPersistenceIsADiscontinuity: a server restarted from
// a snapshot older than the last raises comes back with the accepted
// anchor (it was in the snapshot) but without those raises. The first
// read after the restart dials (every pooled connection died with the
// server) and refuses; Verify then sees the new run_id.
func TestRedisRestartWithPersistenceIsADiscontinuity(t *testing.T) {
	r := testcluster.RedisWithArgsFor(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	s := verified(t, rdb)
	raiseOK(t, s, []string{"t"}, 4)
	if err := rdb.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	raiseOK(t, s, []string{"t"}, 9) // acknowledged, not in the snapshot
	checkWrite(t, s, []string{"t"}, 9)
	restartRedis(t, r)
	if got := rdb.Get(ctx, s.anchorKey).Val(); got != *s.accepted.Load() {
		t.Fatalf("the snapshot does not hold the accepted anchor (%q): the test tests nothing", got)
	}
	pos, err := s.WritePosition(ctx, []string{"t"})
	if !IsDiscontinuity(err) {
		t.Fatalf("first read after a restart from an old snapshot: %v, %v; want a discontinuity (the snapshot lacks the raise to 9)", pos, err)
	}
	// The reads after it know the connections suspect and read the
	// server's run_id: another server than the anchor's.
	for i := 0; i < 3; i++ {
		pos, err := s.WritePosition(ctx, []string{"t"})
		if !IsDiscontinuity(err) || !strings.Contains(err.Error(), "another server") {
			t.Fatalf("read %d after a restart from an old snapshot: %v, %v; want a discontinuity naming another server", i+2, pos, err)
		}
	}
	e, err := s.Verify(ctx)
	if err != nil || !e.Changed {
		t.Fatalf("Verify after the restart: %+v, %v; want Changed (new run_id)", e, err)
	}
	s.Accept(e)
	checkWrite(t, s, []string{"t"}, 4) // lost: the reader must be conservative
}

// restartRedis stops r and starts it again on the same port (skipping t
// for a server it cannot restart).
func restartRedis(t *testing.T, r *testcluster.Redis) {
	t.Helper()
	ctx := context.Background()
	if err := r.Stop(ctx); errors.Is(err, testcluster.ErrUnsupported) {
		t.Skipf("cannot restart this Redis server: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
}
