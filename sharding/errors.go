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
	// other than the transaction's shard (the transaction is untouched and
	// can be rolled back), or a statement of several parts (a set
	// operation, CTEs, a join, a subquery) whose parts pin different
	// shards: it runs whole on one database, so it is refused before
	// anything runs; split it per shard.
	ErrCrossShard = errors.New("sharding: statement reaches another shard than the one it must run on")
	// ErrShardKeyChange: a write that may change the shard key of a stored
	// row, or store a row whose ID already lives on another shard (an
	// UPDATE assigning the key a value the plugin cannot prove is the
	// row's own, an upsert or Save of a row whose ID is another shard's).
	// Rows do not move between shards: delete the row and create it for
	// the new user. Nothing is written.
	ErrShardKeyChange = errors.New("sharding: write would change a row's shard key")
	// ErrStaleLookup: a statement inside a transaction was routed by
	// order IDs whose pairs the lookup's cache held stale (it was
	// unreachable when they changed), so it ran on a shard that does not
	// hold those orders and found none of them, or not all: its answer, or
	// the rows it changed, would be wrong. The cached pairs are corrected
	// by the time it is returned: roll back and run the transaction again
	// (it is then routed by the right pairs, or refused with ErrCrossShard
	// when the orders live on another shard than the transaction's).
	// Outside a transaction such a statement is routed again instead,
	// except a raw write (Exec) that had already changed rows on the shard
	// the stale pairs named: it returns this error, naming the order IDs
	// it did not reach.
	ErrStaleLookup = errors.New("sharding: statement routed by a stale lookup pair")
	// ErrScatterUnsupported: a read spanning several shards that needs a
	// merge the plugin cannot do correctly (HAVING beyond comparisons of
	// aggregates and group columns, aggregates other than
	// COUNT/SUM/MIN/MAX/AVG, ORDER BY an expression, text ordering under a
	// collation other than byte order, raw SQL with ORDER BY or aggregates,
	// ...); the message names what. Nothing is returned.
	ErrScatterUnsupported = merge.ErrUnsupported
	// ErrNoAtomicCommit: a write over several shards whose shards cannot
	// commit it atomically (PostgreSQL with max_prepared_transactions = 0,
	// MariaDB before 10.5 or without its decision table, MySQL), refused
	// at its commit: every shard rolled back, nothing is written. The
	// message names the shards and the remedy; Config.SequentialCommits
	// commits such writes shard by shard instead.
	ErrNoAtomicCommit = errors.New("sharding: the shards cannot commit a write over several of them atomically")
	// ErrUnknownShard: a hint or a hot-user entry names a shard that is not
	// configured.
	ErrUnknownShard = errors.New("sharding: unknown shard")
	// ErrUnsupportedStatement: a statement the router cannot send whole to
	// one database nor merge exactly (a table expression joining a sharded
	// table; a part of a set operation, CTE, join or subquery that reads a
	// sharded table without pinning it to a shard by its key; a sharded
	// table read with a table of the default database); refused before
	// anything runs rather than answered from one database.
	ErrUnsupportedStatement = errors.New("sharding: statement the router cannot route whole")
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

	// ErrCommitPending is returned by a write over several shards whose
	// decision committed (two-phase commit, twophase.go) but whose part on
	// some shard could not be committed yet: that shard failed between
	// the phases. The write is not lost, so do not run it again: the part
	// stays prepared and is committed in the background, and until then
	// reads of its rows on that shard return their old values.
	ErrCommitPending = errors.New("sharding: write committed; a shard's part is not visible yet")
)
