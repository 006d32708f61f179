package lookup

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/internal/testcluster"
	"github.com/freshread/freshread/sharding"
)

func newStore(t *testing.T, neg time.Duration) (*Store, redis.UniversalClient) {
	t.Helper()
	r := testcluster.RedisFor(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{r.Addr()}})
	t.Cleanup(func() { rdb.Close() })
	return newStoreOn(t, rdb, neg), rdb
}

// newStoreOn is a Store on a fresh lookup database with rdb as its cache.
func newStoreOn(t testing.TB, rdb redis.UniversalClient, neg time.Duration) *Store {
	t.Helper()
	pg := testcluster.PostgresFor(t)
	db, err := gorm.Open(postgres.Open(pg.PrimaryDSN(pg.CreateDatabase(t))), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s, err := db.DB(); err == nil {
			s.Close()
		}
	})
	s := New(Config{DB: db, Redis: rdb, Prefix: "t:" + t.Name() + ":", NegativeTTL: neg})
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
