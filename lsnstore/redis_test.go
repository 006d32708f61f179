package lsnstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/redis/go-redis/v9"
)

// testTimeout is the store timeout of the tests that do not test timeouts:
// generous, for a loaded machine under -race.
const testTimeout = 5 * time.Second

var dbSeq atomic.Int64

// uniqueDB returns a database name not used before, even on a Redis server
// that outlives this process (FRESHREAD_REDIS_ADDR).
func uniqueDB(name string) string {
	return fmt.Sprintf("%s-%d-%d", name, time.Now().UnixNano(), dbSeq.Add(1))
}

// redisClient returns a client of the package's Redis server.
func redisClient(t testing.TB) (*testcluster.Redis, *redis.Client) {
	t.Helper()
	r := testcluster.RedisFor(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	return r, rdb
}

func newTestRedis(rdb redis.UniversalClient, opts RedisOptions) *Redis {
	if opts.Timeout == 0 {
		opts.Timeout = testTimeout
	}
	return NewRedis(rdb, opts)
}

func TestRedisConformance(t *testing.T) {
	_, rdb := redisClient(t)
	checkConformance(t, func(_ *testing.T, db string) Store {
		return newTestRedis(rdb, RedisOptions{Database: uniqueDB(db)})
	})
}

func TestRedisKeyLayout(t *testing.T) {
	_, rdb := redisClient(t)
	ctx := context.Background()
	for _, tc := range []struct {
		opts   RedisOptions
		prefix string
	}{
		{RedisOptions{}, "freshread:"},
		{RedisOptions{Prefix: "app:"}, "app:"},
		{RedisOptions{NoPrefix: true}, ""},
	} {
		db := uniqueDB("layout")
		tc.opts.Database = db
		s := newTestRedis(rdb, tc.opts)
		raiseOK(t, s, []string{"users"}, mustLSN(t, "16/B374D848"))
		raiseOK(t, s, nil, mustLSN(t, "1/A"))
		publishOK(t, s, map[string]LSN{"replica-1": mustLSN(t, "2/0"), "replica-2": mustLSN(t, "1/FF")})
		p := tc.prefix + "{" + db + "}-"
		want := map[string]string{
			p + "users-write_lsn":          "16/B374D848",
			p + "users#u-write_lsn":        "16/B374D848", // unkeyed (keys.go)
			p + "write_lsn":                "16/B374D848",
			p + "write_lsn-unknown_tables": "1/A",
			p + "replay_lsn":               "1/FF",
			p + "replay_lsn-replica-1":     "2/0",
			p + "replay_lsn-replica-2":     "1/FF",
		}
		for k, v := range want {
			got, err := rdb.Get(ctx, k).Result()
			if err != nil || got != v {
				t.Errorf("GET %s = %q, %v; want %q", k, got, err, v)
			}
		}
		h, err := rdb.HGetAll(ctx, p+"replicas").Result()
		if err != nil || len(h) != 2 || h["replica-1"] != "2/0" || h["replica-2"] != "1/FF" {
			t.Errorf("HGETALL %sreplicas = %v, %v", p, h, err)
		}
		keys, err := rdb.Keys(ctx, "*{"+db+"}*").Result()
		if err != nil || len(keys) != len(want)+1 {
			t.Errorf("keys of %s: %q, %v; want %d keys", db, keys, err, len(want)+1)
		}
	}
}

func TestRedisTTL(t *testing.T) {
	_, rdb := redisClient(t)
	ctx := context.Background()
	db := uniqueDB("ttl")
	const ttl = time.Minute
	s := newTestRedis(rdb, RedisOptions{Database: db, TTL: ttl})
	raiseOK(t, s, []string{"a"}, 10)
	raiseOK(t, s, nil, 5)
	publishOK(t, s, map[string]LSN{"r": 3})
	keys, err := rdb.Keys(ctx, "*{"+db+"}*").Result()
	if err != nil || len(keys) != 7 { // a, a#u, max, unknown, replay min, r, replicas
		t.Fatalf("keys: %q, %v", keys, err)
	}
	for _, k := range keys {
		d, err := rdb.PTTL(ctx, k).Result()
		if err != nil || d <= 0 || d > ttl {
			t.Errorf("PTTL %s = %v, %v; want in (0, %v]", k, d, err, ttl)
		}
	}
	// A raise that does not change the value still refreshes the TTL.
	k := "freshread:{" + db + "}-a-write_lsn"
	rdb.PExpire(ctx, k, time.Second)
	raiseOK(t, s, []string{"a"}, 1)
	if d, err := rdb.PTTL(ctx, k).Result(); err != nil || d <= time.Second {
		t.Errorf("PTTL %s after a lower raise = %v, %v; want refreshed to about %v", k, d, err, ttl)
	}
	checkWrite(t, s, []string{"a"}, 10)

	// Expired keys read as "no recent write".
	short := newTestRedis(rdb, RedisOptions{Database: uniqueDB("ttl-short"), TTL: 50 * time.Millisecond})
	raiseOK(t, short, []string{"a"}, 10)
	checkWrite(t, short, []string{"a"}, 10)
	time.Sleep(200 * time.Millisecond)
	checkWrite(t, short, []string{"a"}, 0)
	checkWrite(t, short, nil, 0)
}

func TestRedisGarbage(t *testing.T) {
	_, rdb := redisClient(t)
	ctx := context.Background()
	db := uniqueDB("garbage")
	s := newTestRedis(rdb, RedisOptions{Database: db})
	p := "freshread:{" + db + "}-"
	for _, garbage := range []string{"zz", "1/123456789", "1/2/3", "", " 1/2"} {
		rdb.Set(ctx, p+"t-write_lsn", garbage, time.Minute)
		_, err := s.WritePosition(ctx, []string{"u", "t"})
		if !errors.Is(err, ErrBadPosition) {
			t.Fatalf("garbage %q: WritePosition error = %v; want ErrBadPosition", garbage, err)
		}
		if !strings.HasPrefix(err.Error(), "lsnstore: ") {
			t.Errorf("error %q lacks the lsnstore: prefix", err)
		}
		checkWrite(t, s, []string{"u"}, 0) // other tables still readable
		raiseOK(t, s, []string{"t"}, 7)    // repairs
		checkWrite(t, s, []string{"u", "t"}, 7)
		rdb.Del(ctx, p+"t-write_lsn")
	}

	// Garbage in the unknown-tables key spoils every read until repaired.
	rdb.Set(ctx, p+"write_lsn-unknown_tables", "nope", time.Minute)
	if _, err := s.WritePosition(ctx, []string{"u"}); !errors.Is(err, ErrBadPosition) {
		t.Fatalf("WritePosition error = %v; want ErrBadPosition", err)
	}
	raiseOK(t, s, nil, 3)
	checkWrite(t, s, []string{"u"}, 3)

	// In the maximum and in replica positions.
	rdb.Set(ctx, p+"write_lsn", "x/1", time.Minute)
	if _, err := s.WritePosition(ctx, nil); !errors.Is(err, ErrBadPosition) {
		t.Fatalf("WritePosition(nil) error = %v; want ErrBadPosition", err)
	}
	raiseOK(t, s, []string{"t"}, 1) // overwrites the garbage maximum with 0/1
	checkWrite(t, s, nil, 1)
	checkWrite(t, s, []string{"t"}, 3) // t was deleted, then raised to 1; unknown is 3

	rdb.Set(ctx, p+"replay_lsn-r", "?", time.Minute)
	publishOK(t, s, map[string]LSN{"r": 4, "q": 5})
	checkReplay(t, s, map[string]LSN{"r": 4, "q": 5}, 4)
	rdb.HSet(ctx, p+"replicas", "r", "bad")
	if _, err := s.ReplayPositions(ctx); !errors.Is(err, ErrBadPosition) {
		t.Fatalf("ReplayPositions error = %v; want ErrBadPosition", err)
	}
	rdb.Set(ctx, p+"replay_lsn", "bad", time.Minute)
	if _, err := s.ReplayPosition(ctx); !errors.Is(err, ErrBadPosition) {
		t.Fatalf("ReplayPosition error = %v; want ErrBadPosition", err)
	}
}

func TestRedisScriptFlushed(t *testing.T) {
	_, rdb := redisClient(t)
	ctx := context.Background()
	s := newTestRedis(rdb, RedisOptions{Database: uniqueDB("flush")})
	raiseOK(t, s, []string{"a"}, 1)
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	raiseOK(t, s, []string{"a"}, 2) // NOSCRIPT: falls back to EVAL
	publishOK(t, s, map[string]LSN{"r": 1})
	checkWrite(t, s, []string{"a"}, 2)
}

func TestRedisInvalidOptions(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never contacted
	defer rdb.Close()
	for _, tc := range []struct {
		rdb  redis.UniversalClient
		opts RedisOptions
		want string
	}{
		{rdb, RedisOptions{}, ErrNoDatabase.Error()},
		{rdb, RedisOptions{Database: "d", Prefix: "p", NoPrefix: true}, "lsnstore: RedisOptions.Prefix is \"p\" with NoPrefix set"},
		{rdb, RedisOptions{Database: "d", TTL: -time.Second}, "lsnstore: RedisOptions.TTL is -1s; it must be at least 1ms"},
		{rdb, RedisOptions{Database: "d", TTL: time.Microsecond}, "lsnstore: RedisOptions.TTL is 1µs; it must be at least 1ms"},
		{nil, RedisOptions{Database: "d"}, "lsnstore: NewRedis: nil redis client"},
		{rdb, RedisOptions{Database: "}d"}, "lsnstore: RedisOptions.Database \"}d\" contains \"}\", which breaks its hash tag"},
		{rdb, RedisOptions{Database: "d", Prefix: "a{}:"}, "lsnstore: RedisOptions.Prefix \"a{}:\" contains a brace, which breaks the hash tag"},
	} {
		if tc.rdb != nil {
			if err := tc.opts.Validate(); err == nil || err.Error() != tc.want {
				t.Errorf("Validate(%+v) = %v; want %s", tc.opts, err, tc.want)
			}
		}
		s := NewRedis(tc.rdb, tc.opts)
		errs := []error{s.Raise(ctx, []string{"a"}, PositionOf(1)), s.PublishReplay(ctx, map[string]Position{"r": PositionOf(1)})}
		_, err := s.WritePosition(ctx, nil)
		errs = append(errs, err)
		_, err = s.ReplayPositions(ctx)
		errs = append(errs, err)
		_, err = s.ReplayPosition(ctx)
		errs = append(errs, err)
		errs = append(errs, s.Err())
		for i, err := range errs {
			if err == nil || err.Error() != tc.want {
				t.Errorf("%+v: call %d error = %v; want %s", tc.opts, i, err, tc.want)
			}
			if noDB := tc.opts.Database == ""; errors.Is(err, ErrNoDatabase) != noDB {
				t.Errorf("%+v: call %d error %v: errors.Is(ErrNoDatabase) = %v", tc.opts, i, err, !noDB)
			}
		}
	}
	if err := (RedisOptions{Database: "d", NoPrefix: true, TTL: time.Millisecond, Timeout: -1}).Validate(); err != nil {
		t.Errorf("Validate of valid options: %v", err)
	}
}

// TestRedisStopped stops the shared server: it must not run in parallel
// with other Redis tests.
func TestRedisStopped(t *testing.T) {
	r, rdb := redisClient(t)
	ctx := context.Background()
	// Default Timeout (50ms). Connections are pooled before the stop.
	s := NewRedis(rdb, RedisOptions{Database: uniqueDB("stopped")})
	raiseOK(t, s, []string{"a"}, 1)
	if err := r.Stop(ctx); errors.Is(err, testcluster.ErrUnsupported) {
		t.Skipf("cannot stop this Redis server: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	restarted := false
	defer func() {
		if !restarted {
			r.Start(ctx)
		}
	}()
	calls := map[string]func() error{
		"WritePosition":      func() error { _, err := s.WritePosition(ctx, []string{"a"}); return err },
		"WritePosition(nil)": func() error { _, err := s.WritePosition(ctx, nil); return err },
		"Raise":              func() error { return s.Raise(ctx, []string{"a"}, PositionOf(2)) },
		"Raise(nil)":         func() error { return s.Raise(ctx, nil, PositionOf(2)) },
		"PublishReplay":      func() error { return s.PublishReplay(ctx, map[string]Position{"r": PositionOf(1)}) },
		"ReplayPositions":    func() error { _, err := s.ReplayPositions(ctx); return err },
		"ReplayPosition":     func() error { _, err := s.ReplayPosition(ctx); return err },
	}
	for round := range 2 { // the second round finds no pooled connection
		for name, call := range calls {
			start := time.Now()
			err := call()
			if err == nil {
				t.Errorf("round %d: %s with Redis stopped: no error", round, name)
				continue
			}
			if !strings.HasPrefix(err.Error(), "lsnstore: ") {
				t.Errorf("%s: error %q lacks the lsnstore: prefix", name, err)
			}
			t.Logf("round %d: %s: %v after %v", round, name, err, time.Since(start).Round(time.Millisecond))
		}
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	// The restarted server is empty and has no script cache.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := s.Raise(ctx, []string{"a"}, PositionOf(3))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Raise after restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	checkWrite(t, s, []string{"a"}, 3)
}

func TestRedisTableKeyCache(t *testing.T) {
	s := NewRedis(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), RedisOptions{Database: "d"})
	if k := s.tableKey("users"); k != "freshread:{d}-users-write_lsn" {
		t.Fatalf("tableKey = %v", k)
	}
	if n := testing.AllocsPerRun(100, func() { s.tableKey("users") }); n != 0 {
		t.Errorf("cached tableKey allocates %v times", n)
	}
}

// TestRedisKeyTTL: key positions take KeyTTL, everything else TTL, in one
// raise; a key position that expired reads as no write.
func TestRedisKeyTTL(t *testing.T) {
	_, rdb := redisClient(t)
	ctx := context.Background()
	db := uniqueDB("keyttl")
	const ttl, keyTTL = time.Minute, 200 * time.Millisecond
	s := newTestRedis(rdb, RedisOptions{Database: db, TTL: ttl, KeyTTL: keyTTL})
	k1, k2 := KeyName("t", "id", 1), KeyName("t", "user_id", 7)
	raiseOK(t, s, []string{KeyedTable("t"), k1, UnkeyedColumnName("t", "user_id"), "u", k2}, 10)
	for name, want := range map[string]time.Duration{
		"t": ttl, "u": ttl, UnkeyedName("u"): ttl, UnkeyedColumnName("t", "user_id"): ttl, k1: keyTTL, k2: keyTTL,
	} {
		k := "freshread:{" + db + "}-" + name + "-write_lsn"
		d, err := rdb.PTTL(ctx, k).Result()
		if err != nil || d <= want/2 || d > want {
			t.Errorf("PTTL %s = %v, %v; want about %v", k, d, err, want)
		}
	}
	checkWrite(t, s, []string{k1}, 10)
	time.Sleep(2 * keyTTL)
	checkWrite(t, s, []string{k1, k2}, 0)
	checkWrite(t, s, []string{"t", UnkeyedColumnName("t", "user_id")}, 10)
	if err := NewRedis(rdb, RedisOptions{Database: db, KeyTTL: -time.Second}).Raise(ctx, []string{"t"}, PositionOf(1)); err == nil {
		t.Error("a negative KeyTTL was accepted")
	}
}

// TestRedisWritePositions: a batch answers each set as WritePosition does,
// in one command, for the store and for a verified reader.
func TestRedisWritePositions(t *testing.T) {
	_, rdb := redisClient(t)
	checkWritePositions(t, rdb)
}

func checkWritePositions(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	s := newTestRedis(rdb, RedisOptions{Database: uniqueDB("batch")})
	raiseOK(t, s, []string{"a"}, 10)
	raiseOK(t, s, []string{"b"}, 20)
	raiseOK(t, s, []string{KeyedTable("c"), KeyName("c", "id", 1)}, 30)
	raiseOK(t, s, nil, 5)
	sets := [][]string{{"a"}, {"b", "a"}, {"x"}, nil, {}, {KeyName("c", "id", 1), UnkeyedName("c")}, {KeyName("c", "id", 2), UnkeyedName("c")}}
	rr := s.NewReader().(*RedisReader)
	if _, err := rr.WritePositions(ctx, sets); !IsDiscontinuity(err) {
		t.Fatalf("an unverified reader answered: %v", err)
	}
	e, err := rr.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rr.Accept(e)
	for _, br := range []BatchReader{s, rr} {
		got, err := br.WritePositions(ctx, sets)
		if err != nil || len(got) != len(sets) {
			t.Fatalf("%T: %v, %v", br, got, err)
		}
		for i, set := range sets {
			want, err := s.WritePosition(ctx, set)
			if err != nil {
				t.Fatal(err)
			}
			if !got[i].Equal(want) {
				t.Errorf("%T: set %q: %v, want %v", br, set, got[i], want)
			}
		}
	}
}

// TestRedisRefusesClientSideCache: a client with go-redis's client-side
// cache would answer reads from process memory after another process's
// raise; every call of a store on it fails with an error saying so.
func TestRedisRefusesClientSideCache(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", Protocol: 3, ClientSideCacheConfig: &redis.ClientSideCacheConfig{}})
	defer rdb.Close()
	s := NewRedis(rdb, RedisOptions{Database: "d"})
	_, err := s.WritePosition(context.Background(), []string{"a"})
	if err == nil || !strings.Contains(err.Error(), "caches reads on the client side") {
		t.Fatalf("WritePosition on a caching client: %v", err)
	}
	if err := s.Raise(context.Background(), []string{"a"}, PositionOf(1)); err == nil || !strings.Contains(err.Error(), "caches reads") {
		t.Fatalf("Raise on a caching client: %v", err)
	}
}

// TestRedisKeySignatureTTL: a key signature lives for the store's TTL
// after the last claim or keyed raise that matched it, and a claim's
// answer holds for a quarter of it; then a process with other key columns
// can record its own.
func TestRedisKeySignatureTTL(t *testing.T) {
	_, rdb := redisClient(t)
	ctx := context.Background()
	const ttl = 400 * time.Millisecond
	s := newTestRedis(rdb, RedisOptions{Database: uniqueDB("sig-ttl"), TTL: ttl})
	claim := func(sig string) string {
		t.Helper()
		got, valid, err := s.ClaimSignature(ctx, "t", sig)
		if err != nil || valid != ttl/4 {
			t.Fatalf("ClaimSignature(%q) = %q, %v, %v; want valid for %v", sig, got, valid, err, ttl/4)
		}
		return got
	}
	if got := claim("v1:id;"); got != "v1:id;" {
		t.Fatalf("first claim: %q", got)
	}
	// Refreshed by a matching keyed raise, a matching claim, not by
	// another's claim.
	for range 3 {
		time.Sleep(ttl / 2)
		raiseOK(t, s, []string{SignedKeyedTable("t", "v1:id;"), KeyName("t", "id", 1)}, 10)
		if got := claim("v1:id;user_id"); got != "v1:id;" {
			t.Fatalf("claim of another signature while the first is used: %q", got)
		}
	}
	time.Sleep(ttl / 2)
	if got := claim("v1:id;"); got != "v1:id;" {
		t.Fatalf("claim: %q", got)
	}
	time.Sleep(ttl + ttl/4)
	if got := claim("v1:id;user_id"); got != "v1:id;user_id" {
		t.Fatalf("claim after the first signature went unused for its TTL: %q, want the new one", got)
	}
}

// TestRedisContextTimeouts: the store tells whether its client honours
// context deadlines on sockets, for a single-server, Sentinel and Cluster
// client (none is contacted), and says it cannot tell for other clients.
func TestRedisContextTimeouts(t *testing.T) {
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	for _, c := range []interface{ Close() error }{single, plain, failover, cluster, ring} {
		defer c.Close()
	}
	for _, tc := range []struct {
		name           string
		rdb            redis.UniversalClient
		enabled, known bool
	}{
		{"single", single, true, true},
		{"single without", plain, false, true},
		{"sentinel without", failover, false, true},
		{"cluster", cluster, true, true},
		{"ring", ring, false, false},
	} {
		enabled, known := NewRedis(tc.rdb, RedisOptions{Database: "d"}).ContextTimeouts()
		if enabled != tc.enabled || known != tc.known {
			t.Errorf("%s: ContextTimeouts() = %v, %v; want %v, %v", tc.name, enabled, known, tc.enabled, tc.known)
		}
	}
}
