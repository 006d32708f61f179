package plugin

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"weak"
)

// Prepared statements in folded transactions. GORM's prepared-statement
// pool (gorm.Config.PrepareStmt, gorm.Session.PrepareStmt) prepares a
// statement once, on the pool or in a transaction, caches it, and runs it
// in every later transaction through the transaction's StmtContext, which
// binds it to the transaction's connection. A folded transaction runs on a
// *sql.Conn, which has no StmtContext: it prepares the statement's SQL on
// its connection itself, once per transaction, and closes what it
// prepared when the transaction ends, as *sql.Tx does.
//
// The SQL of a statement is remembered (stmtSQL) when it is prepared
// through the primary's pool or one of its transactions, which is where
// GORM's prepared pool prepares every statement it caches for the primary,
// for as long as the statement lives.

// stmtSQL maps the statements prepared on the primary to their SQL, without
// keeping them alive.
type stmtSQL struct {
	m sync.Map // weak.Pointer[sql.Stmt] -> string
}

// remember records s's SQL until s is collected.
func (r *stmtSQL) remember(s *sql.Stmt, query string) {
	k := weak.Make(s)
	r.m.Store(k, query)
	runtime.AddCleanup(s, func(k weak.Pointer[sql.Stmt]) { r.m.Delete(k) }, k)
}

// query returns s's SQL.
func (r *stmtSQL) query(s *sql.Stmt) (string, bool) {
	v, ok := r.m.Load(weak.Make(s))
	if !ok {
		return "", false
	}
	return v.(string), true
}

// errUnknownStmt: a folded transaction was asked to run a statement that
// was not prepared through the primary's pool, so its SQL is not known.
var errUnknownStmt = errors.New("plugin: a transaction was given a prepared statement that was not prepared on the primary's pool")

// foldedStmt is StmtContext for a folded transaction: stmt as prepared on
// the transaction's connection. A failure to prepare is returned by every
// use of the statement, as *sql.Tx does.
func (t *trackedTx) foldedStmt(ctx context.Context, stmt *sql.Stmt) *sql.Stmt {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.stmts[stmt]; ok {
		return s
	}
	if t.ended.Load() {
		return failedStmt(ctx, sql.ErrTxDone)
	}
	query, ok := t.p.stmtSQL.query(stmt)
	if !ok {
		return failedStmt(ctx, errUnknownStmt)
	}
	s, err := t.conn.PrepareContext(ctx, query)
	if err != nil {
		return failedStmt(ctx, err)
	}
	if t.stmts == nil {
		t.stmts = make(map[*sql.Stmt]*sql.Stmt)
	}
	t.stmts[stmt] = s
	return s
}

// closeStmts closes the statements the transaction prepared for
// StmtContext; it is called once the transaction has ended, before its
// connection goes back to the pool.
func (t *trackedTx) closeStmts() {
	t.mu.Lock()
	stmts := t.stmts
	t.stmts = nil
	t.mu.Unlock()
	for parent, s := range stmts {
		if s != parent { // GORM's own statements are GORM's to close
			_ = s.Close()
		}
	}
}

// failedStmt returns a statement every use of which fails with err.
// database/sql builds such statements only for itself; this one comes from
// a driver of this package that prepares, for a name it was given, a
// statement that answers that name's error. It is prepared on one
// connection that is never closed, so database/sql keeps no record of it:
// nothing needs to close it.
func failedStmt(ctx context.Context, err error) *sql.Stmt {
	name := "freshread-failed-" + strconv.FormatUint(failedSeq.Add(1), 10)
	failedErrs.Store(name, err)
	conn, cerr := failedConn()
	if cerr == nil {
		var s *sql.Stmt
		if s, cerr = conn.PrepareContext(context.WithoutCancel(ctx), name); cerr == nil {
			return s
		}
	}
	// Cannot happen: the driver connects and prepares without I/O.
	panic(fmt.Sprintf("plugin: prepare a failed statement: %v", cerr))
}

var (
	failedSeq  atomic.Uint64
	failedErrs sync.Map // statement name -> error
	failedConn = sync.OnceValues(func() (*sql.Conn, error) {
		return sql.OpenDB(failedConnector{}).Conn(context.Background())
	})
)

type failedConnector struct{}

func (failedConnector) Connect(context.Context) (driver.Conn, error) { return failedDriverConn{}, nil }
func (failedConnector) Driver() driver.Driver                        { return failedDriver{} }

type failedDriver struct{}

func (failedDriver) Open(string) (driver.Conn, error) { return failedDriverConn{}, nil }

type failedDriverConn struct{}

func (failedDriverConn) Prepare(name string) (driver.Stmt, error) {
	err, ok := failedErrs.LoadAndDelete(name)
	if !ok {
		return nil, fmt.Errorf("plugin: no failure named %q", name)
	}
	return failedStmtDriver{err.(error)}, nil
}
func (failedDriverConn) Close() error              { return nil }
func (failedDriverConn) Begin() (driver.Tx, error) { return nil, errors.New("plugin: not a database") }

type failedStmtDriver struct{ err error }

func (failedStmtDriver) Close() error                                 { return nil }
func (failedStmtDriver) NumInput() int                                { return -1 }
func (s failedStmtDriver) Exec([]driver.Value) (driver.Result, error) { return nil, s.err }
func (s failedStmtDriver) Query([]driver.Value) (driver.Rows, error)  { return nil, s.err }
