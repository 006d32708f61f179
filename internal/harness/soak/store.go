package soak

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// Store is the position store's servers in a soak: one Redis server, or a
// Sentinel setup (primary, replica, three sentinels) that every process
// reaches through a go-redis FailoverClient.
type Store struct {
	Redis    *testcluster.Redis
	Sentinel *testcluster.RedisSentinel
}

// storeSpec is how a process connects to the store (childSpec carries it).
type storeSpec struct {
	Addr          string   `json:",omitempty"`
	SentinelAddrs []string `json:",omitempty"`
	// Cut marks the cut instance's way to the store (a relay, cut.go):
	// connections fail fast, as integration_test's writer cut has them.
	Cut bool `json:",omitempty"`
}

func (s Store) spec() storeSpec {
	if s.Sentinel != nil {
		return storeSpec{SentinelAddrs: s.Sentinel.SentinelAddrs()}
	}
	return storeSpec{Addr: s.Redis.Addr()}
}

// kind names the store in the report.
func (s Store) kind() string {
	if s.Sentinel != nil {
		return "redis-sentinel"
	}
	return "redis"
}

// client is a new client of the store.
func (sp storeSpec) client() redis.UniversalClient {
	if len(sp.SentinelAddrs) > 0 {
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testcluster.SentinelMaster,
			SentinelAddrs: sp.SentinelAddrs, ContextTimeoutEnabled: true})
	}
	if sp.Cut {
		return redis.NewClient(&redis.Options{Addr: sp.Addr, ContextTimeoutEnabled: true,
			DialTimeout: 200 * time.Millisecond, MaxRetries: 1})
	}
	return redis.NewClient(&redis.Options{Addr: sp.Addr, ContextTimeoutEnabled: true})
}

// faults are the store's faults.
func (s Store) faults() []Fault {
	if s.Sentinel != nil {
		return sentinelFaults(s.Sentinel)
	}
	return redisFaults(s.Redis)
}

// sentinelFaults: a failover after a crash in which the promoted replica
// misses the last writes (its replication stalled first), and FLUSHALL on
// the master.
func sentinelFaults(s *testcluster.RedisSentinel) []Fault {
	onMaster := func(ctx context.Context, f func(*redis.Client) error) error {
		addr, err := s.MasterAddr(ctx)
		if err != nil {
			return err
		}
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		return f(c)
	}
	return []Fault{
		{Name: "sentinel-failover", LosesLeases: true,
			Inject: func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				// The server killed last time comes back as the replica.
				if err := s.Rejoin(ctx); err != nil {
					return err
				}
				s.StallReplication(true)
				// Raises acknowledged by the master, never replicated.
				time.Sleep(200 * time.Millisecond)
				if _, err := s.KillMaster(ctx); err != nil {
					return err
				}
				return nil
			}},
		{Name: "sentinel-flushall",
			Inject: func(ctx context.Context) error {
				return onMaster(ctx, func(c *redis.Client) error { return c.FlushAll(ctx).Err() })
			}},
	}
}

func (s Store) String() string { return fmt.Sprintf("%s %v", s.kind(), s.spec()) }
