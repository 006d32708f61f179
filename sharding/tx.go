package sharding

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"

	"gorm.io/gorm"

	"github.com/freshread/freshread/sharding/merge"
)

// shardPool is the connection pool of a session pinned to a shard (see
// Sharding.On). Transactions begun on it are shardTx values, which tell
// the router which shard the transaction lives on.
type shardPool struct {
	gorm.ConnPool // the shard's own pool (the freshread primary pool when installed)
	sh            *shard
}

var _ gorm.ConnPoolBeginner = (*shardPool)(nil)

func (p *shardPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	inner, err := beginOn(ctx, p.ConnPool, opts, "shard "+p.sh.name)
	if err != nil {
		return nil, err
	}
	return &shardTx{ConnPool: inner, sh: p.sh}, nil
}

// beginOn begins a transaction on pool (a database's own pool: the
// freshread primary pool, *sql.DB, ...).
func beginOn(ctx context.Context, pool gorm.ConnPool, opts *sql.TxOptions, where string) (gorm.ConnPool, error) {
	switch b := pool.(type) {
	case gorm.ConnPoolBeginner:
		return b.BeginTx(ctx, opts)
	case gorm.TxBeginner:
		return b.BeginTx(ctx, opts)
	}
	return nil, fmt.Errorf("sharding: %s: pool %T cannot begin a transaction", where, pool)
}

func (p *shardPool) GetDBConn() (*sql.DB, error) { return p.sh.sqlDB() }

// shardTx is a transaction on one shard. Statements of the transaction run
// on its inner transaction (the shard's own transaction type, so the
// shard's freshread plugin sees its own transaction and publishes after
// COMMIT).
type shardTx struct {
	gorm.ConnPool // the inner transaction
	sh            *shard
	lookup        txLookup // lookup_tx.go
}

var _ gorm.TxCommitter = (*shardTx)(nil)

func (t *shardTx) Commit() error {
	err := endTx(t.ConnPool, true)
	return settleLookup(context.Background(), &t.lookup, err)
}

func (t *shardTx) Rollback() error {
	err := endTx(t.ConnPool, false)
	return errors.Join(err, t.lookup.settle(context.Background(), false))
}

// settleLookup settles a transaction's lookup record after its COMMIT
// returned commitErr: committed, or refused (rolled back); a COMMIT whose
// outcome is unknown leaves the pairs as they are (a pair without its row
// is found stale by reads; a row without its pair is looked for on every
// shard).
func settleLookup(ctx context.Context, l *txLookup, commitErr error) error {
	switch {
	case commitErr == nil:
		return l.settle(ctx, true)
	case errors.Is(commitErr, ErrCommitPending):
		return errors.Join(commitErr, l.settle(ctx, true))
	case definitelyFailed(commitErr):
		return errors.Join(commitErr, l.settle(ctx, false))
	}
	return commitErr
}

func (t *shardTx) GetDBConn() (*sql.DB, error) { return t.sh.sqlDB() }

// defaultPool wraps the default database's pool (installed by Initialize)
// so that every transaction begun on it (db.Transaction, Begin, and the
// one GORM opens itself for CreateInBatches) is a lazyTx, which begins
// where its first statement goes: on the default database, or on the
// shard of a sharded table's rows.
//
// Like the freshread primary pool it must not implement Commit or
// Rollback: GORM would take it for a transaction.
type defaultPool struct {
	gorm.ConnPool // the default database's pool
	s             *Sharding
}

var (
	_ gorm.ConnPoolBeginner = (*defaultPool)(nil)
	_ gorm.GetDBConnector   = (*defaultPool)(nil)
)

func (p *defaultPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	t := &lazyTx{s: p.s, def: p.ConnPool, ctx: ctx, opts: opts}
	// Who began it: resolved only if a batch spans shards (batchOrigin).
	t.npc = runtime.Callers(2, t.pcs[:])
	return t, nil
}

func (p *defaultPool) GetDBConn() (*sql.DB, error) { return connDB(p.ConnPool) }

func connDB(pool gorm.ConnPool) (*sql.DB, error) {
	switch c := pool.(type) {
	case *sql.DB:
		return c, nil
	case gorm.GetDBConnector:
		return c.GetDBConn()
	}
	return nil, gorm.ErrInvalidDB
}

// lazyTx is a transaction begun on the default database's pool. It
// begins nothing until its first statement: a statement on a table of
// the default database binds it to the default database, one on a
// sharded table to the shard of its rows; from then on it is that
// database's transaction, and a statement for any other database fails
// with ErrCrossShard. The one exception is the transaction GORM's
// CreateInBatches opens for itself (batch), and the one a write over
// several shards outside any transaction runs in (statement_tx.go): it may
// hold one transaction per shard its rows reach, committed atomically
// across them (two-phase commit, XA), or refused (ErrNoAtomicCommit), or
// with Config.SequentialCommits committed one after the other.
//
// Statements without a table before the binding (SAVEPOINT, SET LOCAL)
// are kept and run first on the database it binds to.
type lazyTx struct {
	s    *Sharding
	def  gorm.ConnPool // the default database's pool
	ctx  context.Context
	opts *sql.TxOptions
	pcs  [5]uintptr // the callers of BeginTx
	npc  int

	lookup txLookup // lookup_tx.go

	mu     sync.Mutex
	done   bool
	onDef  gorm.ConnPool   // the default database's transaction, once bound there
	shards []int           // shard indexes, in the order their transactions began
	inner  []gorm.ConnPool // their transactions
	// xa holds, for each of inner, its XA part (nil: an ordinary
	// transaction), and gtrid the write's global ID (xa.go).
	xa     []*xaPart
	gtrid  string
	queued []string // statements without a table, run when it binds
	// committed: the shards whose transactions Commit committed.
	committed []int
	batchOK   int8 // 0 unknown, 1 CreateInBatches' own, -1 not
}

var (
	_ gorm.TxCommitter    = (*lazyTx)(nil)
	_ gorm.GetDBConnector = (*lazyTx)(nil)
)

// where says which database the transaction is on (for errors).
func (t *lazyTx) where() string {
	switch {
	case t.onDef != nil:
		return "the default database"
	case len(t.shards) > 0:
		return fmt.Sprintf("shard %q", t.s.shards[t.shards[0]].name)
	}
	return "no database yet"
}

// batch reports whether GORM's CreateInBatches began the transaction for
// itself (gorm.(*DB).Begin called by Transaction called by
// CreateInBatches), rather than the application.
func (t *lazyTx) batch() bool {
	if t.batchOK == 0 {
		t.batchOK = -1
		frames := runtime.CallersFrames(t.pcs[:t.npc])
		want := []string{"gorm.io/gorm.(*DB).Begin", "gorm.io/gorm.(*DB).Transaction", "gorm.io/gorm.(*DB).CreateInBatches"}
		for i := 0; i < len(want); i++ {
			f, more := frames.Next()
			if f.Function != want[i] {
				return false
			}
			if !more && i < len(want)-1 {
				return false
			}
		}
		t.batchOK = 1
	}
	return t.batchOK == 1
}

// queue keeps a statement without a table for the database the
// transaction binds to; it reports false once bound.
func (t *lazyTx) queue(sqlText string) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return true, sql.ErrTxDone
	}
	if t.onDef != nil || len(t.shards) > 0 {
		return false, nil
	}
	t.queued = append(t.queued, sqlText)
	return true, nil
}

// defaultConn binds the transaction to the default database (beginning
// it there) and returns the default database's transaction.
func (t *lazyTx) defaultConn() (gorm.ConnPool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil, sql.ErrTxDone
	}
	if t.onDef != nil {
		return t.onDef, nil
	}
	if len(t.shards) > 0 {
		return nil, fmt.Errorf("%w: a table of the default database in a transaction on %s", ErrCrossShard, t.where())
	}
	conn, err := beginOn(t.ctx, t.def, t.opts, "the default database")
	if err != nil {
		return nil, fmt.Errorf("sharding: begin the transaction on the default database: %w", err)
	}
	if err := t.replay(conn); err != nil {
		return nil, err
	}
	t.onDef = conn
	return conn, nil
}

// shardConn binds the transaction to shard sh (beginning a transaction
// there) and returns that transaction. many allows a second shard (only
// for CreateInBatches' own transaction).
func (t *lazyTx) shardConn(sh *shard, many bool) (gorm.ConnPool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil, sql.ErrTxDone
	}
	for i, si := range t.shards {
		if si == sh.index {
			return t.inner[i], nil
		}
	}
	if t.onDef != nil || (len(t.shards) > 0 && !many) {
		return nil, fmt.Errorf("%w: shard %q in a transaction on %s", ErrCrossShard, sh.name, t.where())
	}
	var (
		conn gorm.ConnPool
		part *xaPart
		err  error
	)
	if len(t.shards) > 0 && t.opts == nil && t.s.xaAllowed(t.ctx, t.s.shards[t.shards[0]], sh) {
		part, err = t.beginXA(sh)
		if part != nil {
			conn = part.conn
		}
	} else {
		conn, err = beginOn(t.ctx, sh.db.Config.ConnPool, t.opts, "shard "+sh.name)
	}
	if err != nil {
		return nil, fmt.Errorf("sharding: begin the transaction on shard %q: %w", sh.name, err)
	}
	if err := t.replay(conn); err != nil {
		if part != nil {
			_ = part.rollback(context.WithoutCancel(t.ctx))
		}
		return nil, err
	}
	t.shards = append(t.shards, sh.index)
	t.inner = append(t.inner, conn)
	t.xa = append(t.xa, part)
	return conn, nil
}

// onDefault reports whether the transaction is bound to the default
// database.
func (t *lazyTx) onDefault() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.onDef != nil
}

// boundShard returns the shard the transaction is bound to (nil when it
// is not bound to exactly one shard).
func (t *lazyTx) boundShard() *shard {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.shards) != 1 {
		return nil
	}
	return t.s.shards[t.shards[0]]
}

// replay runs the queued statements on the transaction just begun; on
// failure it rolls it back.
func (t *lazyTx) replay(conn gorm.ConnPool) error {
	for _, q := range t.queued {
		if _, err := conn.ExecContext(t.ctx, q); err != nil {
			if c, ok := conn.(gorm.TxCommitter); ok {
				_ = c.Rollback()
			}
			return fmt.Errorf("sharding: run %q at the start of the transaction: %w", q, err)
		}
	}
	t.queued = nil
	return nil
}

// one returns the transaction's only database connection, binding it to
// the default database when it has none (direct use of the pool, outside
// GORM's callbacks: the router always picks the connection itself).
func (t *lazyTx) one() (gorm.ConnPool, error) {
	t.mu.Lock()
	switch {
	case t.done:
		t.mu.Unlock()
		return nil, sql.ErrTxDone
	case t.onDef != nil:
		defer t.mu.Unlock()
		return t.onDef, nil
	case len(t.inner) == 1:
		defer t.mu.Unlock()
		return t.inner[0], nil
	case len(t.inner) > 1:
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: a statement outside GORM's callbacks in a transaction over several shards", ErrCrossShard)
	}
	t.mu.Unlock()
	return t.defaultConn()
}

func (t *lazyTx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	c, err := t.one()
	if err != nil {
		return nil, err
	}
	return c.PrepareContext(ctx, query)
}

func (t *lazyTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	c, err := t.one()
	if err != nil {
		return nil, err
	}
	return c.ExecContext(ctx, query, args...)
}

func (t *lazyTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	c, err := t.one()
	if err != nil {
		return nil, err
	}
	return c.QueryContext(ctx, query, args...)
}

func (t *lazyTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	c, err := t.one()
	if err != nil {
		return merge.ErrRow(ctx, err)
	}
	return c.QueryRowContext(ctx, query, args...)
}

func (t *lazyTx) GetDBConn() (*sql.DB, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.shards) > 0 {
		return t.s.shards[t.shards[0]].sqlDB()
	}
	return connDB(t.def)
}

// Commit commits what the transaction began: the default database's
// transaction, or its shard's; CreateInBatches' transaction over several
// shards commits them in the order they began, and when one fails rolls
// back those not yet committed and says which committed.
func (t *lazyTx) Commit() error {
	return settleLookup(t.ctx, &t.lookup, t.end(true))
}

// Rollback rolls back every transaction it began.
func (t *lazyTx) Rollback() error {
	err := t.end(false)
	return errors.Join(err, t.lookup.settle(t.ctx, false))
}

func (t *lazyTx) end(commit bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return sql.ErrTxDone
	}
	t.done = true
	t.queued = nil
	if t.onDef != nil {
		return endTx(t.onDef, commit)
	}
	return t.endShards(commit)
}

// refuseNotAtomic rolls back a write over several shards that cannot
// commit atomically, of which the shards named cannot take part, and
// returns ErrNoAtomicCommit with the remedy. t.mu is held.
func (t *lazyTx) refuseNotAtomic(shards []string) error {
	return errors.Join(fmt.Errorf("%w: %w", errNotCommitted, fmt.Errorf("%w: the write reached shards %s, which cannot all take part in two-phase commit (PostgreSQL) or XA (MariaDB); every shard rolled back, nothing is written: set max_prepared_transactions above 0 on PostgreSQL shards and their replicas, run MariaDB 10.5 or later with CREATE on the coordinating shard's database (or create the freshread_xa_decisions table, docs/guide/sharding.md), split the write by user, or set sharding.Config.SequentialCommits to commit shard by shard (a failure between the commits then leaves part of the write)", ErrNoAtomicCommit, strings.Join(shards, ", "))), t.endShards(false))
}

// endShards ends the transaction on every shard it reached: commit
// (atomically when the shards can: XA, two-phase commit; else refused,
// or with Config.SequentialCommits shard by shard) or roll back. t.mu is
// held.
func (t *lazyTx) endShards(commit bool) error {
	if slices.ContainsFunc(t.xa, func(x *xaPart) bool { return x != nil }) {
		if commit {
			var plain []string // parts beside the XA ones that are not
			for i := 1; i < len(t.inner); i++ {
				if t.xa[i] == nil {
					plain = append(plain, t.s.shards[t.shards[i]].name)
				}
			}
			if len(plain) > 0 && !t.s.cfg.SequentialCommits {
				return t.refuseNotAtomic(plain)
			}
			return t.endXA()
		}
		err := endTx(t.inner[0], false)
		for i := 1; i < len(t.inner); i++ {
			if t.xa[i] == nil {
				err = errors.Join(err, endTx(t.inner[i], false))
			}
		}
		return errors.Join(err, t.rollbackXA())
	}
	if commit && len(t.inner) > 1 {
		if t.s.twoPhaseAllowed(t.ctx, t.shards) {
			return t.endTwoPhase()
		}
		if !t.s.cfg.SequentialCommits {
			names := make([]string, len(t.shards))
			for i, si := range t.shards {
				names[i] = t.s.shards[si].name
			}
			return t.refuseNotAtomic(names)
		}
	}
	var (
		committed []string
		errs      []error
	)
	for i, conn := range t.inner {
		name := t.s.shards[t.shards[i]].name
		if !commit || len(errs) > 0 {
			if err := endTx(conn, false); err != nil && commit {
				errs = append(errs, fmt.Errorf("sharding: roll back shard %q: %w", name, err))
			} else if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err := endTx(conn, true); err != nil {
			if len(committed) > 0 {
				err = fmt.Errorf("sharding: commit on shard %q failed after shards %s committed (not atomic across shards): %w", name, strings.Join(committed, ", "), err)
			} else {
				err = fmt.Errorf("sharding: commit on shard %q: %w", name, err)
			}
			errs = append(errs, err)
			continue
		}
		committed = append(committed, name)
		t.committed = append(t.committed, t.shards[i])
	}
	return errors.Join(errs...)
}

func endTx(conn gorm.ConnPool, commit bool) error {
	c, ok := conn.(gorm.TxCommitter)
	if !ok {
		return gorm.ErrInvalidTransaction
	}
	if commit {
		return c.Commit()
	}
	return c.Rollback()
}
