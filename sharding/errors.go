package sharding

import (
	"errors"

	"github.com/freshread/freshread/sharding/merge"
)

// Errors returned by the sharding plugin. Test them with errors.Is: the
// returned errors wrap these sentinels with the table and the detail.
var (
	// ErrConfig reports an invalid Config (returned by db.Use).
	ErrConfig = errors.New("sharding: invalid configuration")
	// ErrNoShardKey: a write to a sharded table whose shard cannot be
	// derived from the statement (no user ID, no resolvable order ID, no
	// hint). Nothing is written.
	ErrNoShardKey = errors.New("sharding: no shard key in statement")
	// ErrCrossShard: a statement inside a transaction targets a database
	// other than the transaction's shard. The transaction is untouched and
	// can be rolled back.
	ErrCrossShard = errors.New("sharding: statement for another shard inside a transaction")
	// ErrScatterUnsupported: a read spanning several shards that needs a
	// merge the plugin cannot do correctly (HAVING beyond comparisons of
	// aggregates and group columns, aggregates other than
	// COUNT/SUM/MIN/MAX/AVG, ORDER BY an expression, text ordering under a
	// collation other than byte order, raw SQL with ORDER BY or aggregates,
	// ...); the message names what. Nothing is returned.
	ErrScatterUnsupported = merge.ErrUnsupported
	// ErrUnknownShard: a hint or a hot-user entry names a shard that is not
	// configured.
	ErrUnknownShard = errors.New("sharding: unknown shard")
	// ErrNoFreshness: Sharding.Freshness asked for the freshread plugin of
	// a shard that has none (no replicas).
	ErrNoFreshness = errors.New("sharding: shard has no freshread plugin")
	// ErrMapConflict: MapStore.Publish lost a race with another publisher.
	ErrMapConflict = errors.New("sharding: bucket map changed concurrently")
	// ErrMapStale: the process has not been able to refresh the shared
	// bucket map for Config.MapLease, so it refuses to route sharded
	// statements (a move may have changed the owner of any bucket).
	ErrMapStale = errors.New("sharding: bucket map not refreshed within its lease")
	// ErrBucketMoved: the shard refused a write for a bucket it no longer
	// owns (or one whose move is switching). The map has been refreshed;
	// the statement can be retried.
	ErrBucketMoved = errors.New("sharding: bucket not owned by the shard")
)
