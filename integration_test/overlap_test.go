package integration_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// withRedis gives the test's env a Redis store: reads overlap their store
// lookup with the replica query (Config.SequentialLookup off). Its calls
// may take a second (the default 50 ms failed verifications, and so sent
// reads to the primary, on a CI machine running packages in parallel
// under -race).
func withRedis(t *testing.T) envOpt {
	r := testcluster.RedisFor(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{r.Addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	return withStore(lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: "overlap-" + t.Name(), Timeout: time.Second}))
}

// discarded reads the plugin's freshread_overlap_discarded_total.
func discarded(t *testing.T, p *plugin.Plugin) float64 {
	t.Helper()
	n := pluginMetric(t, p, "freshread_overlap_discarded_total")
	if n < 0 {
		t.Fatal("no freshread_overlap_discarded_total")
	}
	return n
}

// checkOverlapDiscardsStaleRows: a read that starts on a replica before
// the store has answered, on a replica that has not replayed the row's
// write, never returns the replica's rows: they are discarded (counted)
// and the read runs on the primary. Reads that need nothing the replica
// lacks keep its rows.
func checkOverlapDiscardsStaleRows(t *testing.T, newEnv func(*testing.T, ...envOpt) *env) {
	e := newEnv(t, withRedis(t))
	e.waitReplicaServes(e.db) // the store verified, the replicas seen
	e.staleOnReplicas()
	before := discarded(t, e.plug)
	got := e.readItem(e.db, 1)
	if got.Name != "new" {
		t.Fatalf("STALE READ: an overlapped read returned the replica's rows: %+v", got)
	}
	e.mustPrimary(got, "overlapped read of a row the replicas lack")
	if d := discarded(t, e.plug) - before; d != 1 {
		t.Fatalf("discarded replica queries: %v, want 1", d)
	}
	o := e.readOther(e.db)
	if o.Name != "untouched" {
		t.Fatalf("untouched table: %+v", o)
	}
	e.mustReplica(o, "overlapped read of an untouched table")
	if d := discarded(t, e.plug) - before; d != 1 {
		t.Fatalf("discarded replica queries after a fresh read: %v, want 1", d)
	}
	e.resumeAll()
}

func TestOverlapDiscardsStaleRows(t *testing.T)        { checkOverlapDiscardsStaleRows(t, newEnv) }
func TestMariaDBOverlapDiscardsStaleRows(t *testing.T) { checkOverlapDiscardsStaleRows(t, newMariaEnv) }

// TestOverlappedWritePathsNeverReadStale runs every write path with a
// Redis store, so every read overlaps its lookup: none may be read stale.
func TestOverlappedWritePathsNeverReadStale(t *testing.T) {
	for i, wp := range writePaths {
		t.Run(wp.name, func(t *testing.T) {
			runWritePath(t, newEnv(t, withRedis(t)), wp, uint(i+1))
		})
	}
}

func TestMariaDBOverlappedWritePathsNeverReadStale(t *testing.T) {
	for i, wp := range writePathsWithoutReturning() {
		t.Run(wp.name, func(t *testing.T) {
			runWritePath(t, newMariaEnv(t, withRedis(t)), wp, uint(i+1))
		})
	}
}

// TestSequentialLookupStillWorks: with Config.SequentialLookup the same
// read is fresh and nothing is discarded.
func TestSequentialLookupStillWorks(t *testing.T) {
	e := newEnv(t, withRedis(t), withConfig(func(c *plugin.Config) { c.SequentialLookup = true }))
	e.staleOnReplicas()
	if got := e.readItem(e.db, 1); got.Name != "new" {
		t.Fatalf("STALE READ with sequential lookups: %+v", got)
	}
	if d := discarded(t, e.plug); d != 0 {
		t.Fatalf("discarded replica queries with sequential lookups: %v", d)
	}
	e.mustReplica(e.readOther(e.db), "sequential read of an untouched table")
	e.resumeAll()
}
