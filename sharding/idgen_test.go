package sharding

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

func TestIDLayoutRoundTrip(t *testing.T) {
	g, err := NewIDGenerator(context.Background(), IDConfig{Worker: 37})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	before := time.Now()
	for _, route := range []int{0, 1, 513, 1023, routeHot | 5} {
		id, err := g.Next(route)
		if err != nil {
			t.Fatal(err)
		}
		d, ok := DecodeID(id)
		if !ok || id <= 0 {
			t.Fatalf("%d not minted", id)
		}
		if d.Worker != 37 || d.Time.Before(before.Add(-time.Millisecond)) || d.Time.After(time.Now().Add(time.Second)) {
			t.Fatalf("decoded %+v", d)
		}
		if route&routeHot != 0 {
			if !d.Hot || d.Shard != 5 {
				t.Fatalf("hot decoded %+v", d)
			}
		} else if d.Hot || d.Bucket != route {
			t.Fatalf("bucket decoded %+v for %d", d, route)
		}
	}
	if IsMinted(12345) || IsMinted(-1) {
		t.Fatal("old IDs taken for minted")
	}
}

// IDs of one route code are strictly increasing, also past 16 per ms.
func TestIDMonotonicAndBurst(t *testing.T) {
	g, _ := NewIDGenerator(context.Background(), IDConfig{Worker: 1})
	defer g.Close()
	var prev int64
	for i := 0; i < 5000; i++ {
		id, err := g.Next(7)
		if err != nil {
			t.Fatal(err)
		}
		if id <= prev {
			t.Fatalf("id %d after %d", id, prev)
		}
		prev = id
	}
}

// A clock step backwards within MaxAhead is absorbed (IDs keep rising); a
// larger one makes Next wait, then fail with ErrClockBackwards.
func TestIDClockBackwards(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	g, _ := NewIDGenerator(context.Background(), IDConfig{Worker: 2, Now: clock, MaxAhead: 50 * time.Millisecond, ClockWait: 20 * time.Millisecond})
	defer g.Close()
	a, _ := g.Next(3)
	now.Add(int64(-20 * time.Millisecond))
	b, err := g.Next(3)
	if err != nil || b <= a {
		t.Fatalf("small step back: %d after %d, %v", b, a, err)
	}
	now.Add(int64(-10 * time.Second))
	var last error
	for i := 0; i < 2000 && last == nil; i++ {
		_, last = g.Next(3)
	}
	if !errors.Is(last, ErrClockBackwards) {
		t.Fatalf("big step back: %v, want ErrClockBackwards", last)
	}
	now.Add(int64(10 * time.Second))
	if c, err := g.Next(3); err != nil || c <= b {
		t.Fatalf("after the clock caught up: %d, %v", c, err)
	}
}

func redisClient(t *testing.T) (redis.UniversalClient, *testcluster.Redis) {
	t.Helper()
	r := testcluster.RedisFor(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{r.Addr()}})
	t.Cleanup(func() { rdb.Close() })
	return rdb, r
}

// Several generators with leased workers, minting in parallel for the same
// route codes, produce no duplicate.
func TestIDParallelGeneratorsNoDuplicate(t *testing.T) {
	rdb, _ := redisClient(t)
	prefix := "test:" + t.Name()
	const gens, perGen, goroutines = 6, 40000, 3
	var all [gens * goroutines][]int64
	var wg sync.WaitGroup
	workers := map[int]bool{}
	// Leased at once: each waits out one TTL (a new prefix, as after a
	// loss of Redis's state).
	gs := make([]*IDGenerator, gens)
	errs := make([]error, gens)
	for i := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gs[i], errs[i] = NewIDGenerator(context.Background(), IDConfig{Redis: rdb, Prefix: prefix, LeaseTTL: 3 * time.Second})
		}()
	}
	wg.Wait()
	for i, g := range gs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if workers[g.Worker()] {
			t.Fatalf("worker %d leased twice", g.Worker())
		}
		workers[g.Worker()] = true
	}
	for i, g := range gs {
		for j := 0; j < goroutines; j++ {
			wg.Add(1)
			go func(slot int, g *IDGenerator) {
				defer wg.Done()
				out := make([]int64, 0, perGen)
				for k := 0; k < perGen; k++ {
					id, err := g.Next(k % 4) // four route codes, heavy contention
					if err != nil {
						t.Error(err)
						return
					}
					out = append(out, id)
				}
				all[slot] = out
			}(i*goroutines+j, g)
		}
	}
	wg.Wait()
	seen := make(map[int64]struct{}, gens*goroutines*perGen)
	for _, ids := range all {
		for _, id := range ids {
			if _, dup := seen[id]; dup {
				t.Fatalf("duplicate ID %d", id)
			}
			seen[id] = struct{}{}
		}
	}
	for _, g := range gs {
		g.Close()
	}
}

// A released worker ID is reused, and the new holder starts above the old
// holder's high-water mark even when its clock is behind.
func TestIDLeaseHighWater(t *testing.T) {
	rdb, _ := redisClient(t)
	prefix := "test:" + t.Name()
	future := time.Now().Add(200 * time.Millisecond)
	g1, err := NewIDGenerator(context.Background(), IDConfig{Redis: rdb, Prefix: prefix, LeaseTTL: time.Second, Now: func() time.Time { return future }})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := g1.Next(1)
	w := g1.Worker()
	g1.Close()
	// Take every other worker ID so the next generator gets w again.
	for i := 0; i < MaxWorkers; i++ {
		if i != w {
			rdb.Set(context.Background(), prefix+":worker:"+itoa(i), "x", time.Minute)
		}
	}
	g2, err := NewIDGenerator(context.Background(), IDConfig{Redis: rdb, Prefix: prefix, LeaseTTL: time.Second, ClockWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	if g2.Worker() != w {
		t.Fatalf("worker %d, want %d", g2.Worker(), w)
	}
	b, err := g2.Next(1)
	if err != nil || b <= a {
		t.Fatalf("new holder minted %d (err %v) after %d: would collide", b, err, a)
	}
	if _, err := NewIDGenerator(context.Background(), IDConfig{Redis: rdb, Prefix: prefix, LeaseTTL: time.Second}); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("all workers taken: %v", err)
	}
}

// A generator whose lease was taken over stops minting with its worker
// ID, leases another and mints with that one.
func TestIDLeaseLost(t *testing.T) {
	rdb, _ := redisClient(t)
	prefix := "test:" + t.Name()
	g, err := NewIDGenerator(context.Background(), IDConfig{Redis: rdb, Prefix: prefix, LeaseTTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	w := g.Worker()
	rdb.Set(context.Background(), prefix+":worker:"+itoa(w), "someone else", time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for g.Worker() == w || g.Worker() < 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the generator kept its worker ID after losing its lease")
		case <-time.After(10 * time.Millisecond):
		}
	}
	for {
		id, err := g.Next(0)
		if err == nil {
			if d, _ := DecodeID(id); d.Worker == w {
				t.Fatalf("minted %d with the lost worker %d", id, w)
			}
			return
		}
		if !errors.Is(err, ErrLeaseLost) {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no ID with the new worker ID: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A lease lost between the moment Next chose an ID's millisecond and the
// moment it would return it (a process paused there) makes Next return
// ErrLeaseLost, not the ID.
func TestIDLeaseCheckedAfterTheID(t *testing.T) {
	var g *IDGenerator
	var pause atomic.Bool
	clock := func() time.Time {
		if pause.Load() {
			g.lease.Load().revoked.Store(true) // lost while "paused" here
		}
		return time.Now()
	}
	g, err := NewIDGenerator(context.Background(), IDConfig{Worker: 4, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.Next(1); err != nil {
		t.Fatal(err)
	}
	pause.Store(true)
	if id, err := g.Next(1); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Next returned %d, %v with a lease lost after the ID was chosen", id, err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func BenchmarkIDNext(b *testing.B) {
	g, _ := NewIDGenerator(context.Background(), IDConfig{Worker: 1})
	defer g.Close()
	b.Run("one-bucket", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := g.Next(9); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("many-users", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := g.Next(i & 1023); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("many-users-parallel", func(b *testing.B) {
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(n.Add(1) * 7919)
			for pb.Next() {
				i++
				if _, err := g.Next(i & 1023); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
