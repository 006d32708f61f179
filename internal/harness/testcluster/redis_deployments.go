package testcluster

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// RedisDeployment is one way of running Redis that freshread supports, for
// table-driven tests of every Redis user.
type RedisDeployment struct {
	Name string
	// Client starts the deployment for t (or uses the package's shared
	// server) and returns a client of it, closed when t ends.
	Client func(t testing.TB) redis.UniversalClient
}

// RedisDeployments are "Standalone" (the package's shared server, a
// *redis.Client), "Cluster" (RedisClusterFor, a *redis.ClusterClient) and
// "Sentinel" (RedisSentinelFor, a failover *redis.Client).
func RedisDeployments() []RedisDeployment {
	return []RedisDeployment{
		{"Standalone", func(t testing.TB) redis.UniversalClient {
			rdb := redis.NewClient(&redis.Options{Addr: RedisFor(t).Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { rdb.Close() })
			return rdb
		}},
		{"Cluster", func(t testing.TB) redis.UniversalClient { return RedisClusterFor(t).Client(t) }},
		{"Sentinel", func(t testing.TB) redis.UniversalClient {
			s := RedisSentinelFor(t)
			rdb := redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: SentinelMaster, SentinelAddrs: s.SentinelAddrs(), ContextTimeoutEnabled: true,
			})
			t.Cleanup(func() { rdb.Close() })
			return rdb
		}},
	}
}
