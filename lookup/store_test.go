package lookup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/sharding"
)

func newStore(t *testing.T, neg time.Duration) (*Store, redis.UniversalClient) {
	t.Helper()
	r := testcluster.RedisFor(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{r.Addr()}})
	t.Cleanup(func() { rdb.Close() })
	return newStoreOn(t, rdb, neg), rdb
}

// newStoreOn is a Store on a fresh lookup database with rdb as its cache,
// under a key prefix naming that database (a rerun with -count finds no
// cache entries of an earlier run).
func newStoreOn(t testing.TB, rdb redis.UniversalClient, neg time.Duration) *Store {
	t.Helper()
	pg := testcluster.PostgresFor(t)
	dbName := pg.CreateDatabase(t)
	db := openQuiet(t, postgres.Open(pg.PrimaryDSN(dbName)))
	s := New(Config{DB: db, Redis: rdb, Prefix: "t:" + dbName + ":", NegativeTTL: neg})
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestResolveReadThrough(t *testing.T) {
	s, rdb := newStore(t, 300*time.Millisecond)
	ctx := context.Background()
	if err := s.Put(ctx, []sharding.Pair{{OrderID: 1, UserID: 10}, {OrderID: 2, UserID: 20}}); err != nil {
		t.Fatal(err)
	}
	// Empty the cache: the first Resolve reads the table, the second the cache.
	rdb.Del(ctx, s.key(1), s.key(2))
	got, err := s.Resolve(ctx, []int64{1, 2, 3})
	if err != nil || got[1] != 10 || got[2] != 20 || len(got) != 2 {
		t.Fatalf("resolve: %v %v", got, err)
	}
	if st := s.Stats(); st.Misses != 3 || st.Hits != 0 {
		t.Fatalf("cold stats %+v", st)
	}
	got, _ = s.Resolve(ctx, []int64{1, 2, 3})
	if st := s.Stats(); st.Hits != 3 || st.NegativeHits != 1 || len(got) != 2 {
		t.Fatalf("warm stats %+v, got %v", st, got)
	}
	// The negative entry expires quickly: an order created meanwhile shows.
	s.cfg.Redis = nil
	_ = s.Put(ctx, []sharding.Pair{{OrderID: 3, UserID: 30}}) // written behind the cache
	s.cfg.Redis = rdb
	if got, _ := s.Resolve(ctx, []int64{3}); len(got) != 0 {
		t.Fatalf("negative entry not cached: %v", got)
	}
	time.Sleep(400 * time.Millisecond)
	if got, _ := s.Resolve(ctx, []int64{3}); got[3] != 30 {
		t.Fatalf("after the negative TTL: %v", got)
	}
	// Put overwrites a negative entry at once.
	rdb.Set(ctx, s.key(4), negative, time.Minute)
	_ = s.Put(ctx, []sharding.Pair{{OrderID: 4, UserID: 40}})
	if got, _ := s.Resolve(ctx, []int64{4}); got[4] != 40 {
		t.Fatalf("Put did not replace the negative entry: %v", got)
	}
	// Delete removes both.
	if err := s.Delete(ctx, []int64{1, 4}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Resolve(ctx, []int64{1, 4, 2}); len(got) != 1 || got[2] != 20 {
		t.Fatalf("after delete: %v", got)
	}
}

// ownRedisStore is a Store cached in a Redis server of its own (so the
// test can stop it) through a client with a short dial timeout.
func ownRedisStore(t *testing.T, breakerFailures int) (*Store, *testcluster.Redis) {
	t.Helper()
	r := testcluster.RedisWithArgsFor(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{r.Addr()},
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	s := newStoreOn(t, rdb, 0)
	s.cfg.BreakerFailures = breakerFailures
	return s, r
}

// With Redis stopped, the breaker opens after BreakerFailures failed cache
// calls: later lookups skip Redis (BreakerSkips, not RedisErrors) and the
// table answers; once Redis is back a probe closes the breaker and lookups
// are answered by the cache again.
func TestResolveBreaker(t *testing.T) {
	s, r := ownRedisStore(t, 3)
	ctx := context.Background()
	var pairs []sharding.Pair
	var ids []int64
	for i := int64(1); i <= 20; i++ {
		pairs = append(pairs, sharding.Pair{OrderID: i, UserID: i * 10})
		ids = append(ids, i)
	}
	if err := s.Put(ctx, pairs); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		got, err := s.Resolve(ctx, ids)
		if err != nil || len(got) != len(ids) {
			t.Fatalf("%s: %d of %d resolved, %v", when, len(got), len(ids), err)
		}
		for _, id := range ids {
			if got[id] != id*10 {
				t.Fatalf("%s: order %d -> %d", when, id, got[id])
			}
		}
	}
	check("Redis up")
	if st := s.Stats(); st.Hits != 20 || st.Misses != 0 || st.RedisErrors != 0 {
		t.Fatalf("Redis up: %+v", st)
	}
	if err := r.Stop(ctx); err != nil {
		if errors.Is(err, testcluster.ErrUnsupported) {
			t.Skip("Redis given by environment: cannot stop it")
		}
		t.Fatal(err)
	}
	// Each Resolve makes two cache calls (MGET, then the fill), each failing:
	// the breaker opens at the third failure, during the second Resolve.
	check("Redis down, 1")
	check("Redis down, 2")
	if !s.BreakerOpen() {
		t.Fatalf("breaker closed after %+v", s.Stats())
	}
	before := s.Stats()
	if before.RedisErrors != 3 {
		t.Fatalf("RedisErrors %d before the breaker opened, want 3", before.RedisErrors)
	}
	const calls = 50
	for i := 0; i < calls; i++ {
		check("breaker open")
	}
	after := s.Stats()
	// Only the probes reach Redis (one per backoff: 100 ms, doubling);
	// every other cache call is skipped.
	if errs := after.RedisErrors - before.RedisErrors; errs > 5 || errs+after.BreakerSkips-before.BreakerSkips != 2*calls {
		t.Fatalf("%d cache calls failed with the breaker open (%+v -> %+v)", errs, before, after)
	}
	if after.Misses-before.Misses != calls*20 {
		t.Fatalf("the table answered %d IDs, want %d", after.Misses-before.Misses, calls*20)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Back: within the longest backoff (5 s) a probe succeeds, the breaker
	// closes, and the cache answers (refilled by the probing Resolve).
	deadline := time.Now().Add(8 * time.Second)
	for s.BreakerOpen() {
		if time.Now().After(deadline) {
			t.Fatalf("breaker still open after Redis came back: %+v", s.Stats())
		}
		check("Redis back")
		time.Sleep(20 * time.Millisecond)
	}
	check("Redis back, filled")
	back := s.Stats()
	check("Redis back, cached")
	if st := s.Stats(); st.Hits-back.Hits != 20 || st.Misses != back.Misses || st.BreakerSkips != back.BreakerSkips {
		t.Fatalf("after recovery: %+v -> %+v", back, st)
	}
}

// BenchmarkResolveRedisDown: a Resolve of 20 IDs with Redis stopped, with
// and without the breaker (ns/op is what each lookup pays).
func BenchmarkResolveRedisDown(b *testing.B) {
	for _, bc := range []struct {
		name     string
		failures int
	}{{"breaker", 3}, {"no-breaker", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			r := testcluster.RedisWithArgsFor(b)
			rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{r.Addr()},
				DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
			defer rdb.Close()
			s := newStoreOn(b, rdb, 0)
			s.cfg.BreakerFailures = bc.failures
			ctx := context.Background()
			var pairs []sharding.Pair
			var ids []int64
			for i := int64(1); i <= 20; i++ {
				pairs = append(pairs, sharding.Pair{OrderID: i, UserID: i})
				ids = append(ids, i)
			}
			if err := s.Put(ctx, pairs); err != nil {
				b.Fatal(err)
			}
			if err := r.Stop(ctx); err != nil {
				b.Skip(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if got, err := s.Resolve(ctx, ids); err != nil || len(got) != 20 {
					b.Fatal(len(got), err)
				}
			}
			b.StopTimer()
			st := s.Stats()
			b.ReportMetric(float64(st.RedisErrors)/float64(b.N), "redis-errors/op")
		})
	}
}

// TestPutFreshSaysWhichPairsAreNew: PutFresh returns the IDs whose pairs
// it wrote, not those recorded for the same user before; a pair recorded
// for another user refuses the whole call (ErrIDInUse) and writes none.
func TestPutFreshSaysWhichPairsAreNew(t *testing.T) {
	s, _ := newStore(t, time.Second)
	if err := putFreshCases(s); err != nil {
		t.Fatal(err)
	}
}

// putFreshCases: a recorded and a new pair (the new one reported), and a
// pair recorded for another user (ErrIDInUse, nothing written). It
// returns the first departure.
func putFreshCases(s *Store) error {
	ctx := context.Background()
	if err := s.Put(ctx, []sharding.Pair{{OrderID: 1, UserID: 10}}); err != nil {
		return err
	}
	fresh, err := s.PutFresh(ctx, []sharding.Pair{{OrderID: 1, UserID: 10}, {OrderID: 2, UserID: 10}})
	if err != nil || len(fresh) != 1 || fresh[0] != 2 {
		return fmt.Errorf("PutFresh of a recorded and a new pair: %v, %v; want [2]", fresh, err)
	}
	fresh, err = s.PutFresh(ctx, []sharding.Pair{{OrderID: 3, UserID: 30}, {OrderID: 1, UserID: 30}})
	if !errors.Is(err, sharding.ErrIDInUse) || fresh != nil {
		return fmt.Errorf("PutFresh of a pair recorded for another user: %v, %v; want ErrIDInUse", fresh, err)
	}
	got, err := s.Resolve(ctx, []int64{1, 3})
	if err != nil || got[1] != 10 || len(got) != 1 {
		return fmt.Errorf("after the refused PutFresh: %v, %v; want only order 1, of user 10", got, err)
	}
	return nil
}

// Of PutFresh calls racing to record the same pairs, exactly one reports
// each pair as written by it (the one whose insert took it), so exactly
// one Create may undo it. Before, each read the recorded pairs first and
// several could find a pair missing and report it.
func TestPutFreshRacersReportEachPairOnce(t *testing.T) {
	s, _ := newStore(t, time.Second)
	if err := putFreshRace(s); err != nil {
		t.Fatal(err)
	}
}

// The same on MariaDB (one INSERT IGNORE per pair), with the single-call
// cases of TestPutFreshSaysWhichPairsAreNew.
func TestPutFreshOnMariaDB(t *testing.T) {
	s := New(Config{DB: mariaDB(t)})
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := putFreshCases(s); err != nil {
		t.Fatal(err)
	}
	if err := putFreshRace(s); err != nil {
		t.Fatal(err)
	}
}

// putFreshRace: racers PutFresh the same pairs; each pair must be
// reported by exactly one. It returns the first departure.
func putFreshRace(s *Store) error {
	ctx := context.Background()
	const racers, rounds, n = 6, 20, 20
	for round := 0; round < rounds; round++ {
		pairs := make([]sharding.Pair, n)
		for i := range pairs {
			pairs[i] = sharding.Pair{OrderID: int64(100000 + 1000*round + i), UserID: 7}
		}
		var (
			mu     sync.Mutex
			counts = map[int64]int{}
			errs   []error
			wg     sync.WaitGroup
			start  = make(chan struct{})
		)
		for r := 0; r < racers; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				fresh, err := s.PutFresh(ctx, pairs)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				for _, id := range fresh {
					counts[id]++
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		for _, p := range pairs {
			if counts[p.OrderID] != 1 {
				return fmt.Errorf("round %d: order %d reported written by %d of %d racers, want 1", round, p.OrderID, counts[p.OrderID], racers)
			}
		}
	}
	return nil
}

// mariaDB opens a fresh database on the MariaDB test server.
func mariaDB(t *testing.T) *gorm.DB {
	t.Helper()
	m := testcluster.MariaDBFor(t)
	return openQuiet(t, mysql.Open(m.PrimaryDSN(m.CreateDatabase(t))))
}

// openQuiet opens d without logging, closed when the test ends.
func openQuiet(t testing.TB, d gorm.Dialector) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(d, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s, err := db.DB(); err == nil {
			s.Close()
		}
	})
	return db
}

// Backfill with the lookup and the shard on MariaDB (ROWS and KEY are
// reserved words there; the progress upsert is MariaDB's): every pair
// recorded, the progress kept (a second run skips the source), and a
// restart reads it again. Before, Migrate failed on MariaDB.
func TestBackfillOnMariaDB(t *testing.T) {
	ctx := context.Background()
	s := New(Config{DB: mariaDB(t)})
	shard := mariaDB(t)
	if err := shard.Exec("CREATE TABLE orders (id bigint PRIMARY KEY, user_id bigint NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 25; id++ {
		if err := shard.Exec("INSERT INTO orders VALUES (?, ?)", id, 100+id%3).Error; err != nil {
			t.Fatal(err)
		}
	}
	cfg := BackfillConfig{Sources: []Source{{Name: "s0", DB: shard}}, Table: "orders", IDColumn: "id", KeyColumn: "user_id", Chunk: 10}
	if n, err := s.Backfill(ctx, cfg); err != nil || n != 25 {
		t.Fatalf("backfill: %d pairs, %v; want 25", n, err)
	}
	got, err := s.Resolve(ctx, []int64{1, 13, 25})
	if err != nil || got[1] != 101 || got[13] != 101 || got[25] != 101 {
		t.Fatalf("Resolve after the backfill: %v, %v", got, err)
	}
	if n, err := s.Backfill(ctx, cfg); err != nil || n != 0 {
		t.Fatalf("second backfill: %d pairs, %v; want 0 (done earlier)", n, err)
	}
	cfg.Restart = true
	if n, err := s.Backfill(ctx, cfg); err != nil || n != 25 {
		t.Fatalf("restarted backfill: %d pairs, %v; want 25", n, err)
	}
}
