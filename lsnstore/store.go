package lsnstore

import "context"

// Store keeps the write position of each table of one database and the
// replay positions of its replicas. Implementations are safe for concurrent
// use.
//
// A nil tables slice and an empty one differ: nil means "the tables are
// unknown", an empty slice means "no tables".
type Store interface {
	// WritePosition returns the position that a read of tables must wait
	// for: the merge (per-lane maximum) of those tables' positions and the
	// position of writes whose tables were unknown. tables == nil means the
	// read's own tables are unknown: then it returns the highest position of
	// any write in the database. It returns the zero position when there is nothing to wait
	// for. Exactly one round trip for Redis.
	WritePosition(ctx context.Context, tables []string) (Position, error)

	// Raise raises the write position of each table to at least pos
	// (compare-and-raise, lane by lane: it never lowers a lane, and
	// concurrent raisers leave the merge of their positions) and raises the
	// database-wide maximum too. tables == nil means
	// the written tables are unknown: it raises the "unknown tables"
	// position, which every read includes. Raising to the zero position does
	// nothing. One
	// round trip for Redis.
	Raise(ctx context.Context, tables []string, pos Position) error

	// PublishReplay records each replica's replay position and the minimum
	// (per lane) over the replicas of the call (as <db>-replay_lsn), so
	// every call should name every replica. Positions only move forward per
	// replica (compare-and-raise lane by lane as well); the minimum is
	// computed from the raised positions. A call without replicas does nothing.
	PublishReplay(ctx context.Context, replicas map[string]Position) error

	// ReplayPositions returns the per-replica positions of the replicas
	// named in the latest PublishReplay call (an empty map when none). The
	// map is the caller's.
	ReplayPositions(ctx context.Context) (map[string]Position, error)
}

var (
	_ Store = (*Memory)(nil)
	_ Store = (*Redis)(nil)
)

// BatchReader is a Store that answers several reads' WritePosition at
// once: WritePositions(ctx, sets)[i] is WritePosition(ctx, sets[i]), all
// in one round trip (Redis: one MGET of the union of their keys). The
// plugin batches the lookups of concurrent reads through it.
type BatchReader interface {
	WritePositions(ctx context.Context, sets [][]string) ([]Position, error)
}
