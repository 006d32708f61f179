package reshard

import (
	"context"
	"database/sql"
	"time"
)

// A Mover's phases are the same on every database; what each step runs on
// a shard is its engine's. engine holds what a shard kind does (sessions,
// catalog, guard, lock, state tables, the switch's drain), tableOps what
// one moving table's statements do, and feed how the changes made on the
// source since the copy began are found (a logical slot on PostgreSQL).
// Every shard of a Config is of one kind.

// engine is what the mover runs on one kind of shard.
type engine interface {
	// name is the engine's name for messages ("PostgreSQL").
	name() string
	// defaultSchema is Config.Schema's default.
	defaultSchema() string

	// withTx runs fn in one of the mover's transactions on db: its
	// writes pass the guard, and values are read and written as text the
	// same way on every shard.
	withTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error
	// checkShard returns a warning for the log when the mover's role on
	// sh lacks what it had better have ("" when nothing is missing).
	checkShard(ctx context.Context, sh Shard) (string, error)

	// describe reads t from db's catalog.
	describe(ctx context.Context, db *sql.DB, shard string, t Table) (*tableSide, error)
	// ops returns the statements of a moving table for a map of nb
	// buckets.
	ops(mt *movingTable, nb int) tableOps

	// installGuard creates the fence table and the guard of every table
	// on one shard, changing nothing already in place.
	installGuard(ctx context.Context, db *sql.DB, schema string, tables []*tableSide, nb int) error
	// fence marks buckets with state for move in tx; a bucket another
	// move fenced as incoming is ErrBusy.
	fence(ctx context.Context, tx *sql.Tx, schema string, buckets []int, state, move string) error
	// unfence removes move's fences of state on buckets.
	unfence(ctx context.Context, q querier, schema string, buckets []int, state, move string) error
	// hasFenceTable reports whether the shard has the fence table.
	hasFenceTable(ctx context.Context, db *sql.DB, schema string) (bool, error)

	// tryLock takes the move's lock on conn (the target's), held until
	// unlock or the connection's end; false when another session holds it.
	tryLock(ctx context.Context, conn *sql.Conn, move string) (bool, error)
	unlock(ctx context.Context, conn *sql.Conn, move string) error

	// The move's state on its target (state.go).
	createStateTables(ctx context.Context, db *sql.DB, schema string) error
	// readState returns the move's row (exists false without one, or
	// without the state table).
	readState(ctx context.Context, db *sql.DB, schema, move string) (moveState, error)
	// resetState records the move as planned, with no position, no
	// published version and no copy progress for tables.
	resetState(ctx context.Context, tx *sql.Tx, schema string, mv Move, nb int, phase, slot string, tables []string) error
	setPhase(ctx context.Context, q querier, schema, move, phase string) error
	// setStart records the phase and the feed's start position.
	setStart(ctx context.Context, q querier, schema, move, phase, pos string) error
	// setApplied records that the target holds every change up to pos.
	setApplied(ctx context.Context, q querier, schema, move, pos string) error
	setVersion(ctx context.Context, q querier, schema, move string, v int64) error
	// copyProgress reads a table's copy progress: the last key copied,
	// the rows so far and whether it is done.
	copyProgress(ctx context.Context, q querier, schema, move, table string) (last []sql.NullString, rows int64, done bool, err error)
	// saveCopyProgress adds n rows to a table's progress and records its
	// last key, in tx (the chunk's transaction).
	saveCopyProgress(ctx context.Context, tx *sql.Tx, schema, move, table string, last []sql.NullString, n int, done bool) error

	// newFeed returns the move's change feed.
	newFeed(m *Mover) feed

	// now is db's clock: a transaction that begins after it sees what
	// committed before.
	now(ctx context.Context, db *sql.DB) (time.Time, error)
	// drain waits until no transaction that began on src at or before
	// fencedAt is open.
	drain(ctx context.Context, cfg Config, src Shard, fencedAt time.Time) error
}

// tableOps runs one moving table's statements. Rows are the table's
// columns (movingTable.cols) as text, nil for NULL; keys are the primary
// key's columns as text. A querier is the shard's pool or a mover
// transaction (engine.withTx).
type tableOps interface {
	// readChunk reads, on the source, up to limit rows of the moving
	// buckets after the key last (none: from the start), in key order.
	readChunk(ctx context.Context, q querier, buckets []int, last []sql.NullString, limit int) ([][]*string, error)
	// readByKey reads, on the source, the rows of keys as they are now,
	// and whether each is in a moving bucket.
	readByKey(ctx context.Context, q querier, keys [][]string, buckets []int) (rows [][]*string, moving []bool, err error)
	// upsert writes rows to the target in tx: inserted, or overwriting a
	// row of a moving bucket; a row whose key the target uses outside the
	// moving buckets is ErrForeignRow (named with dst, the target shard).
	upsert(ctx context.Context, tx *sql.Tx, dst string, rows [][]*string, buckets []int) error
	// keys reads up to limit keys of the moving buckets after last (nil:
	// from the start) on the source or the target, in key order.
	keys(ctx context.Context, q querier, onSource bool, buckets []int, last []*string, limit int) ([][]*string, error)
	// deleteKeys deletes the rows of keys that are in a moving bucket on
	// the source or the target.
	deleteKeys(ctx context.Context, q querier, onSource bool, keys [][]*string, buckets []int) error
	// sums reads the row count and checksum of every moving bucket that
	// has rows, on the source or the target.
	sums(ctx context.Context, q querier, onSource bool, buckets []int) (map[int]bucketSum, error)
}

// feed finds and applies the changes made on the source since the copy
// began. Its methods run inside the Mover's (begun) methods.
type feed interface {
	// create starts following the source before anything is copied and
	// returns the start position: every change committed after it will
	// be applied, every one before is visible to the copy. An existing
	// one is kept unless fresh (a rolled-back move prepared again).
	create(ctx context.Context, fresh bool) (string, error)
	// check fails with ErrSlotLost when the changes since the start can
	// no longer be read.
	check(ctx context.Context) error
	// resume makes the feed continue from the position the target
	// recorded last.
	resume(ctx context.Context) error
	// round applies every change committed before it began.
	round(ctx context.Context) (roundResult, error)
	// last applies, during the switch's hold, every change committed
	// before it began, and returns how many.
	last(ctx context.Context) (int64, error)
	// lagBytes is how far behind the source's current position a round
	// reached.
	lagBytes(ctx context.Context, r roundResult) (int64, error)
	// drop releases what the feed holds on the source (it cannot resume
	// after).
	drop(ctx context.Context) error
	// close releases what it holds in this process (at the end of each
	// of the Mover's methods).
	close()
}
