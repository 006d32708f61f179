package sharding

import (
	"context"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/plugin"
)

// Config configures the sharding plugin.
type Config struct {
	// Tables are the sharded tables. Every other table stays on the
	// *gorm.DB the plugin is installed on (the default database).
	Tables []Table

	// Shards are the shard databases, at most 64. With Mod, the order
	// matters: bucket i is Shards[i].
	Shards []ShardConfig

	// Algorithm maps a key to a bucket and a bucket to a shard.
	Algorithm Algorithm

	// HotUsers maps a user ID to the name of a dedicated shard. Routing,
	// ID minting and the lookup follow it.
	HotUsers map[int64]string

	// IDs, when set, mints Table.ID for rows created with a zero ID, with
	// the user's bucket embedded so that the ID routes without the lookup.
	IDs *IDGenerator

	// Lookup resolves order IDs that were not minted by IDs (and is written
	// on Create and Delete for tables with Table.Lookup). Optional.
	Lookup Lookup

	// OnRoute, when set, is called with every routing decision on a
	// sharded table (for logs, metrics and tests).
	OnRoute func(context.Context, Route)

	// Map, when set, holds the shared, versioned bucket map every process
	// follows (NewSQLMapStore; docs/design/sharding-and-moves.md, "The shared bucket map"):
	// it is loaded in Initialize and reloaded every MapRefresh, and
	// Algorithm and HotUsers are then only the map used while none is
	// stored (version 0; it is never published automatically). The
	// stored map must keep Algorithm's bucket count and name configured
	// shards only, or it is refused. Reads that reach shards other than by
	// their key then read only each shard's own rows (an ownership
	// predicate), and raw SQL reads over several shards are refused while
	// a bucket move is in progress. nil (the default): the map is
	// Algorithm and HotUsers, fixed for the life of the process.
	Map MapStore

	// MapRefresh is how often the map is reloaded from Map (and the
	// process's version acknowledged to it). Default 100ms.
	MapRefresh time.Duration

	// MapLease bounds how long a process routes without knowing the
	// current map: when no refresh (load, validation and acknowledgement)
	// has succeeded for MapLease, counted from the start of the last
	// successful Load, a sharded statement first tries a refresh itself
	// and, if that fails too, fails with ErrMapStale. A mover waits for
	// every client to acknowledge a new version or to be MapLease past its
	// last acknowledgement. Must be longer than MapRefresh. Default 2s.
	MapLease time.Duration

	// ClientID names this process in the map store's acknowledgements.
	// Default "<hostname>-<pid>-<8 random hex digits>".
	ClientID string

	// MoveWait is how long a statement outside any transaction that a
	// shard refused with the guard's error (ErrBucketMoved: the bucket
	// moved, or its move is switching) is retried, refreshing the map and
	// routing it again, backing off from 5 ms doubling to 100 ms. Inside
	// a transaction the error is returned at once. Default 5s; negative:
	// never retry.
	MoveWait time.Duration

	// Logger receives the map follower's messages (version changes,
	// refused maps, a failing store). Default slog.Default().
	Logger *slog.Logger

	// DeepOffset is the OFFSET from which a multi-shard ORDER BY ... LIMIT
	// OFFSET read is paged with the two-phase method (see docs/design/sharding-and-moves.md,
	// "Cost") instead of reading offset+limit rows from every shard. 0
	// means 10000 (below it, on one machine, the method's three round
	// trips cost more than the rows it saves); a negative value turns the
	// method off. It is used only
	// when the offset is also at least 4 x the limit.
	DeepOffset int

	// SequentialCommits commits a write over several shards shard by shard
	// when they cannot commit it atomically (two-phase commit needs
	// PostgreSQL shards with max_prepared_transactions above 0; XA needs
	// MariaDB 10.5 or later and its decision table; MySQL shards have
	// neither): a failure between two commits then leaves part of the
	// write, and the error names the shards that committed. Default false:
	// such a write is refused with ErrNoAtomicCommit before anything is
	// committed. Writes on one shard, and writes over shards that commit
	// atomically, are unaffected.
	SequentialCommits bool
}

// Table is a sharded table.
type Table struct {
	// Name is the table name, e.g. "orders".
	Name string
	// Key is the shard-key column, e.g. "user_id".
	Key string
	// ID is the column of the row's own ID (e.g. "id"), routed by decoding
	// minted IDs and otherwise through Config.Lookup. Optional.
	ID string
	// Lookup writes the (ID, Key) pair of every created row to
	// Config.Lookup before the row, and deletes it after a Delete by ID.
	Lookup bool
}

// ShardConfig is one shard database: a primary and its replicas.
type ShardConfig struct {
	// Name identifies the shard in hints, hot users, ranges and errors.
	Name string
	// DB is an opened *gorm.DB for the shard, with its own freshread plugin
	// installed when the shard has replicas. Either DB or Dialector.
	DB *gorm.DB
	// Dialector opens the shard's primary when DB is nil, with the same
	// gorm.Config as the default database.
	Dialector gorm.Dialector
	// Replicas, with Dialector, installs a freshread plugin on the shard
	// with these replicas (Freshness is the rest of its configuration), so
	// reads on the shard go to a replica only when it is fresh.
	Replicas []plugin.Replica
	// Freshness is the rest of the shard's freshread configuration (its
	// Replicas field is ignored: Replicas above).
	Freshness plugin.Config
}

// Lookup maps order IDs to user IDs (see package lookup).
type Lookup interface {
	// Put records (orderID -> userID) pairs. It is called before the rows
	// are inserted. A pair whose order ID is recorded for another user is
	// refused with an error wrapping ErrIDInUse, and then none is written.
	Put(ctx context.Context, pairs []Pair) error
	// Resolve returns the user ID of each known order ID; unknown IDs are
	// absent from the map.
	Resolve(ctx context.Context, orderIDs []int64) (map[int64]int64, error)
	// Delete removes pairs; it is called after the rows are deleted.
	Delete(ctx context.Context, orderIDs []int64) error
}

// LookupFresh is implemented by a Lookup whose Put can say which pairs it
// recorded anew (lookup.Store does). When a Create rolls back or fails,
// the router removes only those: a pair recorded before, for the same
// user, belongs to a row that still exists, and removed, it would let
// another user's Create take the ID. With a Lookup that does not
// implement it, the pairs of a Create given its IDs stay when it fails
// (an ID whose Create failed then stays its user's: another user's Create
// of it is refused with ErrIDInUse). A Create whose IDs were all minted by
// it (Config.IDs) removes its pairs either way: they are new.
type LookupFresh interface {
	// PutFresh is Put, returning the order IDs whose pairs it wrote; the
	// others were recorded for the same user already. Of two calls racing
	// to record one pair, exactly one may report it (the one whose write
	// took it): a pair reported by both would be removed by the one whose
	// Create then fails, under the other's stored row.
	PutFresh(ctx context.Context, pairs []Pair) (fresh []int64, err error)
}

// Pair is one lookup entry.
type Pair struct {
	// OrderID is the order's ID.
	OrderID int64
	// UserID is the user (the shard key) the order belongs to.
	UserID int64
}

// Route is one routing decision, reported to Config.OnRoute.
type Route struct {
	// Table is the sharded table the statement touches ("" when none).
	Table  string
	Op     string   // create, query, row, update, delete, raw
	Shards []string // the shards the statement ran on
	Reason string   // key, id, lookup, hint, transaction, scatter, split
}
