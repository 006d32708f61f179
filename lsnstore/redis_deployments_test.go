package lsnstore

import (
	"testing"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// TestRedisDeployments runs the store's conformance tests and the batched
// read on the deployments besides a single server that freshread
// supports through go-redis's UniversalClient: a Redis Cluster of three
// masters with a replica each, and a primary and replica behind three
// Sentinels. Every key of one database shares its hash tag, so
// each call stays in one slot.
func TestRedisDeployments(t *testing.T) {
	for _, d := range testcluster.RedisDeployments()[1:] { // the single server: TestRedisConformance
		t.Run(d.Name, func(t *testing.T) {
			rdb := d.Client(t)
			checkConformance(t, func(_ *testing.T, db string) Store {
				return newTestRedis(rdb, RedisOptions{Database: uniqueDB(db)})
			})
			t.Run("WritePositions", func(t *testing.T) { checkWritePositions(t, rdb) })
		})
	}
}
