package plugin

import (
	"context"
	"database/sql"

	"gorm.io/gorm"
)

// A raw write run through GORM's Row chain (Row, Rows, and Scan, which
// reads through Rows) outside a transaction returns its result to the
// caller as the server sends it, and the server's implicit commit comes
// after the last row: on PostgreSQL at the Sync that follows the rows, on
// MariaDB and MySQL at the statement's end. Publishing when gorm:row
// returns, as for every other autocommit write, would read the primary's
// position before the commit, and a replica at that position lacks the
// write. rowWritePool therefore runs the statement, reads its whole
// result (the commit has then happened), publishes the write, and gives
// GORM the result from memory, through bufferedRows: the caller sees the
// rows only once the write is published, as it sees any write return
// only once it is.
//
// The result is held in memory: a RETURNING of many rows costs their
// size. Writes inside a transaction commit later, at COMMIT, and are
// published then: they run unchanged.

// rowWritePool is the pool of a raw write on the Row chain outside a
// transaction, and of one on the Query chain whose keys its result
// decides (keys_returning.go): the embedded pool runs it, on the primary
// or a pinned connection.
type rowWritePool struct {
	gorm.ConnPool
	p  *Plugin
	db *gorm.DB
}

// onRowChain reports whether stmt runs on GORM's Row chain (Row and Rows
// set "rows" in the statement's settings).
func onRowChain(stmt *gorm.Statement) bool {
	_, ok := stmt.Settings.Load("rows")
	return ok
}

// recordAutocommitRawWrite records a raw write classified as c that runs
// outside a transaction, and makes it run on a rowWritePool when it must:
// on the Row chain, and on the Query chain too when its keys are read
// from its result (keys_returning.go); the Query chain reads and closes
// the rows before it publishes.
func (p *Plugin) recordAutocommitRawWrite(db *gorm.DB, c rawClass) {
	stmt := db.Statement
	if conn, pinned := stmt.ConnPool.(*sql.Conn); pinned {
		if _, inTx := p.pinnedTxOf(conn); inTx {
			p.recordRawWrite(db, c) // kept for the raw transaction's COMMIT (pinned_tx.go)
			return
		}
	}
	if p.fenceUnseenCommit(db) {
		return // refused before it was sent (lease.go)
	}
	if plan, ok := p.returningPlan(stmt.Context, c, stmt.Vars); ok && keyableConn(db) {
		stmt.Settings.Store(returnedKeysKey{stmt}, plan)
	} else {
		p.recordRawWrite(db, c)
		if !onRowChain(stmt) {
			return
		}
	}
	stmt.ConnPool = &rowWritePool{ConnPool: stmt.ConnPool, p: p, db: db}
}

func (b *rowWritePool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	res := queryResult(ctx, b.ConnPool, query, args)
	b.p.recordReturned(b.db, res)
	b.p.publishAutocommit(b.db) // also when it failed: a failure after the commit may hide a write
	return b.p.rowsOf(ctx, res)
}

func (b *rowWritePool) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	res := queryResult(ctx, b.ConnPool, query, args)
	b.p.recordReturned(b.db, res)
	b.p.publishAutocommit(b.db)
	return b.p.rowOf(ctx, res)
}
