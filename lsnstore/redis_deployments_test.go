package lsnstore

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/internal/testcluster"
)

// TestRedisDeployments runs the store's conformance tests and the batched
// read on the deployments besides a single server that freshread
// supports through go-redis's UniversalClient: a Redis Cluster of three
// masters with a replica each, and a primary and replica behind three
// Sentinels (issue 19). Every key of one database shares its hash tag, so
// each call stays in one slot.
func TestRedisDeployments(t *testing.T) {
	for _, d := range []struct {
		name string
		open func(t *testing.T) redis.UniversalClient
	}{
		{"Cluster", func(t *testing.T) redis.UniversalClient { return testcluster.RedisClusterFor(t).Client(t) }},
		{"Sentinel", func(t *testing.T) redis.UniversalClient {
			s := testcluster.RedisSentinelFor(t)
			rdb := redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: testcluster.SentinelMaster, SentinelAddrs: s.SentinelAddrs(), ContextTimeoutEnabled: true,
			})
			t.Cleanup(func() { rdb.Close() })
			return rdb
		}},
	} {
		t.Run(d.name, func(t *testing.T) {
			rdb := d.open(t)
			checkConformance(t, func(_ *testing.T, db string) Store {
				return newTestRedis(rdb, RedisOptions{Database: uniqueDB(db)})
			})
			t.Run("WritePositions", func(t *testing.T) { checkWritePositions(t, rdb) })
		})
	}
}
