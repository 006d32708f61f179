package plugin

import (
	"context"
	"database/sql"
	"sync"

	"gorm.io/gorm"
)

// primaryPool wraps the primary's connection pool so that every transaction
// begun on it (GORM's default transaction, db.Transaction, Begin) is a
// trackedTx, whose Commit publishes the written tables' positions after the
// driver's COMMIT returns: GORM has no after-commit hook.
//
// It must not implement Commit or Rollback itself: GORM and dbresolver take
// any pool with those methods for a transaction and stop routing.
type primaryPool struct {
	gorm.ConnPool
	db *sql.DB
	p  *Plugin
}

var (
	_ gorm.ConnPoolBeginner = (*primaryPool)(nil)
	_ gorm.GetDBConnector   = (*primaryPool)(nil)
)

func (pp *primaryPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	tx, err := pp.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &trackedTx{Tx: tx, ctx: ctx, p: pp.p}, nil
}

// GetDBConn keeps db.DB() working (SetMaxOpenConns and the like).
func (pp *primaryPool) GetDBConn() (*sql.DB, error) { return pp.db, nil }

// trackedTx is a primary transaction that remembers the tables its
// statements write and publishes their positions after COMMIT succeeds.
type trackedTx struct {
	*sql.Tx
	ctx context.Context
	p   *Plugin

	mu      sync.Mutex
	written writeSet
}

var (
	_ gorm.TxCommitter    = (*trackedTx)(nil)
	_ gorm.GetDBConnector = (*trackedTx)(nil)
)

// mark records that a statement of the transaction writes tables (nil:
// unknown tables).
func (t *trackedTx) mark(tables []string) {
	t.mu.Lock()
	t.written.add(tables)
	t.mu.Unlock()
}

// Commit commits, then (only when COMMIT succeeded) reads the primary's
// insert position and publishes it for every table written. A failed
// publish never fails the commit: the write happened.
func (t *trackedTx) Commit() error {
	if err := t.Tx.Commit(); err != nil {
		return err
	}
	t.mu.Lock()
	w := t.written
	t.written = writeSet{}
	t.mu.Unlock()
	if !w.empty() {
		t.p.publish(t.ctx, w)
	}
	return nil
}

// Rollback publishes nothing.
func (t *trackedTx) Rollback() error { return t.Tx.Rollback() }

func (t *trackedTx) GetDBConn() (*sql.DB, error) { return t.p.primaryDB, nil }

// writeSet is the set of tables a transaction wrote; unknown is set when a
// statement's tables could not be determined.
type writeSet struct {
	tables  map[string]struct{}
	unknown bool
}

func (w *writeSet) add(tables []string) {
	if tables == nil {
		w.unknown = true
		return
	}
	if w.tables == nil {
		w.tables = make(map[string]struct{}, len(tables))
	}
	for _, t := range tables {
		w.tables[t] = struct{}{}
	}
}

func (w *writeSet) merge(o writeSet) {
	w.unknown = w.unknown || o.unknown
	for t := range o.tables {
		if w.tables == nil {
			w.tables = make(map[string]struct{}, len(o.tables))
		}
		w.tables[t] = struct{}{}
	}
}

func (w writeSet) empty() bool { return !w.unknown && len(w.tables) == 0 }

// replicaPool is a replica's pool that retries a read on the primary once
// when the replica fails with a connection error or a recovery conflict.
// Writes never reach it.
type replicaPool struct {
	gorm.ConnPool
	r *replica
	p *Plugin
}

func (rp *replicaPool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	rows, err := rp.ConnPool.QueryContext(ctx, query, args...)
	if err != nil && rp.p.engine.retryable(ctx, err) {
		rp.p.replicaFailed(ctx, rp.r, err)
		return rp.p.primaryDB.QueryContext(ctx, query, args...)
	}
	return rows, err
}

func (rp *replicaPool) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	row := rp.ConnPool.QueryRowContext(ctx, query, args...)
	if err := row.Err(); err != nil && rp.p.engine.retryable(ctx, err) {
		rp.p.replicaFailed(ctx, rp.r, err)
		return rp.p.primaryDB.QueryRowContext(ctx, query, args...)
	}
	return row
}

func (rp *replicaPool) GetDBConn() (*sql.DB, error) { return rp.r.db, nil }
