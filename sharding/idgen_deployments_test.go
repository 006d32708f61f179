package sharding

import (
	"context"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// TestIDGeneratorDeployments: worker leases are taken, renewed, released
// and taken over with their high-water mark on a Redis Cluster and behind
// Sentinel as on a single server.
func TestIDGeneratorDeployments(t *testing.T) {
	for _, d := range testcluster.RedisDeployments()[1:] { // the single server: the tests above
		t.Run(d.Name, func(t *testing.T) {
			rdb := d.Client(t)
			ctx := context.Background()
			prefix := "test:" + t.Name()
			// A lease of 1.5 s is renewed every 0.5 s, each renewal given
			// 0.5 s: a loaded machine (make test runs packages in
			// parallel, the Cluster in containers) has answered a
			// renewal in over 100 ms, which lost a 300 ms lease.
			g1, err := NewIDGenerator(ctx, IDConfig{Redis: rdb, Prefix: prefix, LeaseTTL: 1500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			a, err := g1.Next(1)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Second) // past the TTL: only renewals keep the lease
			b, err := g1.Next(1)
			if err != nil || b <= a {
				t.Fatalf("after renewals: %d, %v (first %d)", b, err, a)
			}
			w := g1.Worker()
			g1.Close()
			// Take every other worker ID so the next generator gets w again.
			for i := 0; i < MaxWorkers; i++ {
				if i != w {
					rdb.Set(ctx, g1.workerKey(i), "x", time.Minute)
				}
			}
			g2, err := NewIDGenerator(ctx, IDConfig{Redis: rdb, Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer g2.Close()
			if g2.Worker() != w {
				t.Fatalf("released worker %d not reused: got %d", w, g2.Worker())
			}
			c, err := g2.Next(1)
			if err != nil || c <= b {
				t.Fatalf("the next holder minted %d (err %v) after %d", c, err, b)
			}
		})
	}
}
