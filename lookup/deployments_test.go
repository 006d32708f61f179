package lookup

import (
	"context"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/sharding"
)

// ids returns n order IDs from first on.
func ids(first, n int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = first + int64(i)
	}
	return out
}

// checkCachedINList: an IN list of 100 IDs is answered by the cache once
// cached, without a Redis error, and deleted pairs leave it.
func checkCachedINList(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	pairs := make([]sharding.Pair, 100)
	for i := range pairs {
		pairs[i] = sharding.Pair{OrderID: int64(1000 + i), UserID: int64(i)}
	}
	if err := s.Put(ctx, pairs); err != nil {
		t.Fatal(err)
	}
	got, err := s.Resolve(ctx, ids(1000, 100))
	if err != nil || len(got) != 100 || got[1099] != 99 {
		t.Fatalf("resolve: %d pairs, %v", len(got), err)
	}
	if st := s.Stats(); st.Hits != 100 || st.Misses != 0 || st.RedisErrors != 0 {
		t.Fatalf("an IN list of 100 cached IDs: %+v, want 100 hits, no miss, no Redis error", st)
	}
	if err := s.Delete(ctx, ids(1000, 50)); err != nil {
		t.Fatal(err)
	}
	got, err = s.Resolve(ctx, ids(1000, 100))
	if err != nil || len(got) != 50 {
		t.Fatalf("after deleting 50: %d pairs, %v", len(got), err)
	}
	if st := s.Stats(); st.RedisErrors != 0 {
		t.Fatalf("Redis errors: %+v", st)
	}
}

// TestCachedINListDeployments runs checkCachedINList on a single Redis, a
// Redis Cluster (where one MGET of the list fails with CROSSSLOT) and a
// Sentinel setup.
func TestCachedINListDeployments(t *testing.T) {
	for _, d := range testcluster.RedisDeployments() {
		t.Run(d.Name, func(t *testing.T) {
			checkCachedINList(t, newStoreOn(t, d.Client(t), time.Second))
		})
	}
}

// BenchmarkResolveINList resolves an IN list of 100 cached IDs: one MGET on
// a single server, a pipeline of GETs split per node on a Cluster.
func BenchmarkResolveINList(b *testing.B) {
	for _, d := range testcluster.RedisDeployments()[:2] { // single server and Cluster
		b.Run(d.Name, func(b *testing.B) {
			s := newStoreOn(b, d.Client(b), time.Second)
			ctx := context.Background()
			pairs := make([]sharding.Pair, 100)
			for i := range pairs {
				pairs[i] = sharding.Pair{OrderID: int64(1000 + i), UserID: int64(i)}
			}
			if err := s.Put(ctx, pairs); err != nil {
				b.Fatal(err)
			}
			list := ids(1000, 100)
			b.ReportAllocs()
			for b.Loop() {
				if got, err := s.Resolve(ctx, list); err != nil || len(got) != 100 {
					b.Fatalf("resolve: %d, %v", len(got), err)
				}
			}
			if st := s.Stats(); st.Misses != 0 || st.RedisErrors != 0 {
				b.Fatalf("stats: %+v", st)
			}
		})
	}
}
