package merge

import (
	"context"
	"errors"

	"gorm.io/gorm"
)

// ErrUnsupported: a multi-shard read needs a merge this package does not
// do; the message names what. The sharding plugin returns it as
// sharding.ErrScatterUnsupported.
var ErrUnsupported = errors.New("sharding: multi-shard read needs a merge that is not supported")

// Shards are the shards one read runs on, numbered 0..Len()-1: what the
// merge needs of the sharding plugin.
type Shards interface {
	// Len is the number of shards of the read (at most 64).
	Len() int
	// Name names shard i in messages.
	Name(i int) string
	// Exec runs sub through shard i's Row chain: the shard's own part of
	// the statement applied first, then change(i, sub.Statement); the
	// result (*sql.Rows in Statement.Dest) or the error is left in sub.
	Exec(i int, sub *gorm.DB, change func(i int, st *gorm.Statement))
	// TextCollation reports how the shards compare the text of the read's
	// table, as far as the merge needs it.
	TextCollation(ctx context.Context) Collation
}

// Collation is how the shards compare text. The merge compares text
// values by their bytes: ORDER BY, MIN/MAX, HAVING's ordering and deep
// pages need Order; DISTINCT, GROUP BY keys, count(DISTINCT) and HAVING's
// equality need Equal. A merge that needs what the shards do not give is
// refused with Why.
type Collation struct {
	// Order: text sorts in byte order.
	Order bool
	// Equal: two text values are equal only when their bytes are (every
	// byte-order collation, and PostgreSQL's deterministic ones).
	Equal bool
	// Why names the database or column whose collation is not, and the
	// remedy.
	Why string
	// Expr, when set, is how the shards compare text computed by an
	// expression (a literal, CASE … THEN 'x', CAST(… AS CHAR), CONCAT):
	// on MariaDB and MySQL it may take the connection's collation
	// (collation_connection) rather than a column's. Nil: as the
	// columns.
	Expr *Collation
}

// Read describes one multi-shard read to Run.
type Read struct {
	// Op and Table name the read in error messages.
	Op, Table string
	// Row: the statement runs through GORM's Row chain (Row, Rows, Scan):
	// the result is left as *sql.Rows or *sql.Row in Statement.Dest.
	Row bool
	// DeepOffset is the OFFSET from which a page over several shards is
	// read in two phases (deep.go); math.MaxInt: never.
	DeepOffset int
	// RowsRead, when set (tests and benchmarks), is told how many rows
	// were read from each shard in each statement of the merge.
	RowsRead func(shard string, rows int)
}

// read is one Run: the shards of mask (bit i: shard i of sh).
type read struct {
	sh         Shards
	mask       uint64
	op, table  string
	row        bool
	deepOffset int
	rowsRead   func(shard string, rows int)
}

// Run runs the read of db's statement on every shard of sh, merges the
// rows as p says (p nil: a concatenation, for raw SQL) and hands the
// result to GORM: scanned into the destination (Find, First, Count,
// Pluck...), or as *sql.Rows / *sql.Row (Row, Rows, Scan). It returns the
// rows affected.
func Run(db *gorm.DB, sh Shards, r Read, p *Plan) (int64, error) {
	tg := &read{sh: sh, op: r.Op, table: r.Table, row: r.Row, deepOffset: r.DeepOffset, rowsRead: r.RowsRead}
	for i := 0; i < sh.Len(); i++ {
		tg.mask |= 1 << i
	}
	return mergeRead(db, tg, p)
}
