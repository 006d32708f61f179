package plugin

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/lib/sqlerr"
	"github.com/freshread/freshread/lsnstore"
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
	if pp.p.foldCommit {
		return pp.p.beginFolded(ctx, pp.db, opts)
	}
	if pp.p.mariaNative {
		return pp.p.beginMaria(ctx, pp.db, opts)
	}
	tx, err := pp.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &trackedTx{Tx: tx, ctx: ctx, p: pp.p}, nil
}

// PrepareContext prepares on the primary and, when transactions fold
// their commit, remembers the statement's SQL for them (folded_stmt.go).
func (pp *primaryPool) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	s, err := pp.db.PrepareContext(ctx, query)
	if err == nil && pp.p.foldCommit {
		pp.p.stmtSQL.remember(s, query)
	}
	return s, err
}

// GetDBConn keeps db.DB() working (SetMaxOpenConns and the like).
func (pp *primaryPool) GetDBConn() (*sql.DB, error) { return pp.db, nil }

// trackedTx is a primary transaction that remembers the tables its
// statements write and publishes their positions after COMMIT succeeds.
// It runs either as a *sql.Tx, or, folded (commit_fold.go), on a
// *sql.Conn whose COMMIT also reads the position.
type trackedTx struct {
	*sql.Tx // nil when folded
	ctx     context.Context
	p       *Plugin

	// Folded: the connection, whether the transaction ended, the stop of
	// its context watch, and the position read with its COMMIT.
	conn      *sql.Conn
	ended     atomic.Bool
	stopWatch func() bool
	foldedPos lsnstore.Position
	// backend is the server process the folded transaction runs in (0:
	// unknown, behind a pooler), which follows a COMMIT of unknown
	// outcome to its end (abandoned_commit.go).
	backend uint32
	// tag is the writer tag the folded transaction holds (writer_tag.go;
	// 0: none), tagged whether the fence passed with it.
	tag    uint32
	tagged bool
	// owned (MariaDB): the connection the *sql.Tx was begun on, returned
	// when it ends; connKey names its driver connection, thread its
	// server thread (0: unknown; abandoned_commit_mariadb.go).
	owned   *sql.Conn
	connKey weak.Pointer[byte]
	thread  uint64

	mu      sync.Mutex
	written writeSet
	// stmts (folded) maps the statements GORM's prepared pool ran in the
	// transaction to their preparation on its connection (folded_stmt.go);
	// a statement prepared on the connection maps to itself.
	stmts map[*sql.Stmt]*sql.Stmt
}

var (
	_ gorm.TxCommitter    = (*trackedTx)(nil)
	_ gorm.GetDBConnector = (*trackedTx)(nil)
	_ gorm.Tx             = (*trackedTx)(nil)
)

func (t *trackedTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if t.conn != nil {
		res, err := t.conn.ExecContext(ctx, query, args...)
		return res, t.p.lapseError(err, t.tag) // before COMMIT: nothing committed
	}
	res, err := t.Tx.ExecContext(ctx, query, args...)
	return res, t.p.lapseError(err, t.tag)
}

func (t *trackedTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if t.conn != nil {
		return t.conn.QueryContext(ctx, query, args...)
	}
	return t.Tx.QueryContext(ctx, query, args...)
}

func (t *trackedTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if t.conn != nil {
		return t.conn.QueryRowContext(ctx, query, args...)
	}
	return t.Tx.QueryRowContext(ctx, query, args...)
}

func (t *trackedTx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	if t.conn == nil {
		return t.Tx.PrepareContext(ctx, query)
	}
	s, err := t.conn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	t.p.stmtSQL.remember(s, query) // GORM may run it in later transactions
	t.mu.Lock()
	if t.stmts == nil {
		t.stmts = make(map[*sql.Stmt]*sql.Stmt)
	}
	t.stmts[s] = s
	t.mu.Unlock()
	return s, nil
}

// StmtContext binds a statement prepared elsewhere to the transaction
// (gorm.Tx): GORM's prepared pool runs its cached statements through it.
func (t *trackedTx) StmtContext(ctx context.Context, stmt *sql.Stmt) *sql.Stmt {
	if t.conn == nil {
		return t.Tx.StmtContext(ctx, stmt)
	}
	return t.foldedStmt(ctx, stmt)
}

// mark records what a statement of the transaction writes.
func (t *trackedTx) mark(w writeSet) {
	w.schemaAfter = w.schemaAfter || w.schema // the graph predates the commit
	t.mu.Lock()
	t.written.merge(w)
	t.mu.Unlock()
}

// takeWritten returns the tables written and forgets them.
func (t *trackedTx) takeWritten() writeSet {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.written
	t.written = writeSet{}
	return w
}

// Commit commits, then (only when COMMIT succeeded) reads the primary's
// insert position and publishes it for every table written. A failed
// publish never fails the commit: the write happened. A commit whose
// outcome is unknown (the connection failed under it) leaves its writes
// pending: reads go to the primary until they are published.
func (t *trackedTx) Commit() error {
	if err := t.fence(); err != nil {
		return err
	}
	if t.conn != nil {
		return t.commitFolded()
	}
	err := t.Tx.Commit()
	t.release()
	if err != nil {
		if w := t.takeWritten(); !w.empty() && commitOutcomeUnknown(err) {
			switch {
			case t.thread != 0:
				t.p.holdAbandoned(t.ctx, w, abandonedThreadPrefix+strconv.FormatUint(t.thread, 10), time.Now())
			case t.backend != 0:
				t.p.abandonedCommit(t.ctx, w, t.backend, time.Now())
			default:
				t.p.unpublished(t.ctx, w, time.Now())
			}
		}
		return err
	}
	if w := t.takeWritten(); !w.empty() {
		w.tagged = t.tagged
		t.p.publish(t.ctx, w)
	}
	return nil
}

// commitFolded is Commit for a folded transaction: one round trip for
// COMMIT and the position.
func (t *trackedTx) commitFolded() error {
	if err := t.ctx.Err(); err != nil {
		// database/sql's Tx rolls back when its context ends; so does a
		// folded one (the context watch may have done it already).
		_ = t.endFolded(rollbackFolded)
		t.takeWritten()
		return err
	}
	err := t.endFolded(commitFolded)
	w := t.takeWritten()
	w.tagged = t.tagged
	switch {
	case err == nil || errors.Is(err, errPosition):
		if !w.empty() {
			committed := time.Now()
			ctx, cancel := t.p.publishContext(t.ctx)
			t.p.publishAt(ctx, w, t.foldedPos, err, committed)
			cancel()
		}
		return nil
	case !w.empty() && commitOutcomeUnknown(err):
		if t.backend != 0 {
			t.p.abandonedCommit(t.ctx, w, t.backend, time.Now())
		} else {
			t.p.unpublished(t.ctx, w, time.Now())
		}
	}
	return err
}

// fence rolls back, and returns the error, a transaction that wrote when
// the plugin refuses commits (fenceWrite): committed, its writes might be
// read stale.
func (t *trackedTx) fence() error {
	t.mu.Lock()
	wrote := !t.written.empty()
	t.mu.Unlock()
	if !wrote {
		return nil
	}
	var err error
	if t.p.tags.tagger != nil {
		err = t.p.fenceTagged(t.ctx, t.tag, t.retag)
		t.tagged = err == nil
	} else {
		err = t.p.fenceWrite(t.ctx)
	}
	if err == nil {
		return nil
	}
	t.takeWritten()
	_ = t.Rollback()
	return err
}

// retag takes the current writer tag for the transaction, in a round trip
// (a folded transaction: the process's lease member changed since BEGIN,
// or none was known then; a *sql.Tx, which a prepared pool made at Open
// keeps, takes it here, before its COMMIT), and returns it.
func (t *trackedTx) retag() (uint32, error) {
	ctx := context.WithoutCancel(t.ctx)
	var tag uint32
	var err error
	switch {
	case t.conn != nil:
		tag, err = t.p.takeTag(ctx, t.conn, true)
	case t.owned != nil:
		tag, err = t.p.takeMariaTag(ctx, t.connKey, t.Tx.QueryRowContext)
	default:
		var backend uint32
		tag, backend, err = t.p.takeTagTx(ctx, t.Tx)
		if backend != 0 {
			t.backend = backend
		}
	}
	if err == nil && tag != 0 {
		t.tag = tag
	}
	return tag, err
}

// Rollback publishes nothing, and ends the marks of the transaction's
// schema changes (schema_changes.go).
func (t *trackedTx) Rollback() error {
	t.p.endSchemaMarks(t.ctx, t.takeWritten().marks)
	if t.conn != nil {
		return t.endFolded(rollbackFolded)
	}
	err := t.Tx.Rollback()
	t.release()
	return err
}

// release returns the connection a MariaDB transaction was begun on.
func (t *trackedTx) release() {
	if t.owned != nil {
		_ = t.owned.Close()
	}
}

func (t *trackedTx) GetDBConn() (*sql.DB, error) { return t.p.primaryDB, nil }

// commitOutcomeUnknown reports whether a COMMIT that returned err may have
// committed anyway: anything but the server refusing the commit or a
// transaction that was already over. A PostgreSQL error that ends the
// session (FATAL, PANIC: the server was shut down or the backend
// terminated) may have come after the commit record.
func commitOutcomeUnknown(err error) bool { return !sqlerr.Refused(err) }

// writeSet is the set of tables a transaction wrote; unknown is set when a
// statement's tables could not be determined.
type writeSet struct {
	tables  map[string]struct{}
	unknown bool
	// schema: a schema change that can add a dependency between tables
	// (addsDependency); marks are the store's marks of such changes under
	// way (schema_changes.go), ended by the raise that publishes them.
	schema bool
	marks  []string
	// schemaAfter: the schema change is counted against the graph the
	// write is raised with (lsnstore.SchemaCheck.Before unset): it may
	// have written rows through the edges it adds (several statements, a
	// transaction).
	schemaAfter bool
	// tagged: committed through a connection that held this process's
	// writer tag when its lease was checked (writer_tag.go); set where
	// the write is committed, never merged.
	tagged bool
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
	w.schema = w.schema || o.schema
	w.schemaAfter = w.schemaAfter || o.schemaAfter
	w.marks = append(w.marks, o.marks...)
	for t := range o.tables {
		if w.tables == nil {
			w.tables = make(map[string]struct{}, len(o.tables))
		}
		w.tables[t] = struct{}{}
	}
}

func (w writeSet) empty() bool { return !w.unknown && !w.schema && len(w.tables) == 0 }

// replicaPool is a replica's pool that retries a read on the primary once
// when the replica fails with a connection error or a recovery conflict.
// Writes never reach it: the write chains put their statement on the
// primary first (writeOnPrimary), an Exec on it is refused, and a
// transaction begun from it (a session derived from a statement routed to
// a replica) begins on the primary.
type replicaPool struct {
	gorm.ConnPool
	r *replica
	p *Plugin
}

var _ gorm.ConnPoolBeginner = (*replicaPool)(nil)

// ExecContext refuses: nothing the plugin routes to a replica executes.
func (rp *replicaPool) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return nil, rp.p.refuseWrite(ctx, rp.r)
}

// BeginTx begins on the primary, as the statement's *gorm.DB would have
// before a read put a replica's pool on it.
func (rp *replicaPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	return rp.p.primary.BeginTx(ctx, opts)
}

func (rp *replicaPool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if !rp.r.enter() {
		rp.p.replicaRemoved(ctx, rp.r)
		return rp.p.primaryDB.QueryContext(ctx, query, args...)
	}
	defer rp.r.leave()
	rows, err, stalled := rp.p.queryReplica(ctx, rp.r, query, args)
	if stalled {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rp.p.replicaStalled(ctx, rp.r)
		return rp.p.primaryDB.QueryContext(ctx, query, args...)
	}
	if err != nil && rp.p.engine.retryable(ctx, err) {
		rp.p.replicaFailed(ctx, rp.r, err)
		return rp.p.primaryDB.QueryContext(ctx, query, args...)
	}
	return rows, err
}

func (rp *replicaPool) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if !rp.r.enter() {
		rp.p.replicaRemoved(ctx, rp.r)
		return rp.p.primaryDB.QueryRowContext(ctx, query, args...)
	}
	defer rp.r.leave()
	row, stalled := rp.p.queryRowReplica(ctx, rp.r, query, args)
	if stalled {
		if ctx.Err() == nil {
			rp.p.replicaStalled(ctx, rp.r)
		}
		return rp.p.primaryDB.QueryRowContext(ctx, query, args...)
	}
	if err := row.Err(); err != nil && rp.p.engine.retryable(ctx, err) {
		rp.p.replicaFailed(ctx, rp.r, err)
		return rp.p.primaryDB.QueryRowContext(ctx, query, args...)
	}
	return row
}

func (rp *replicaPool) GetDBConn() (*sql.DB, error) { return rp.r.db, nil }
