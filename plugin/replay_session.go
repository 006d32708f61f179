package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/lsnstore"
)

// ErrSessionAborted: a replay session could not move to the primary (a
// buffered statement failed when replayed there). Nothing of the write that
// triggered the move was executed.
var ErrSessionAborted = errors.New("plugin: session aborted")

// Session runs fn with a *gorm.DB bound to one connection that starts on a
// fresh-enough replica and moves to the primary when it must
// (reconnect/replay on write):
//
//   - READ statements run on the replica while it has replayed the write
//     positions of their tables (and of the caller's session); a read the
//     replica is too old for moves the session to the primary first.
//   - BUFFER statements (SET, set_config(..., false), PREPARE, temporary
//     tables, ...) run on the replica and are recorded in order. One the
//     replica refuses as read-only (PostgreSQL standbys refuse CREATE TEMP
//     TABLE) moves the session to the primary.
//   - The first WRITE (and BEGIN, unless READ ONLY, and any GORM
//     transaction) takes a primary connection, replays the recorded BUFFER
//     statements in order, then runs; from then on everything runs on the
//     primary. If a replayed statement fails, the session aborts with
//     ErrSessionAborted and the write is not executed.
//
// Writes are published like any other: after COMMIT (explicit
// transactions), or after the statement (autocommit).
func (p *Plugin) Session(ctx context.Context, db *gorm.DB, fn func(tx *gorm.DB) error) (err error) {
	s := &replaySession{p: p, ctx: ctx}
	defer s.close()
	if err := s.start(ctx); err != nil {
		return err
	}
	tx := db.Session(&gorm.Session{NewDB: true, Context: ctx})
	tx.Statement.ConnPool = s
	err = fn(tx)
	if s.abort != nil {
		return s.abort
	}
	return err
}

// replaySession is the ConnPool of a Session. It is not a TxCommitter, so
// GORM keeps routing through it; the routing callback leaves it alone.
type replaySession struct {
	p   *Plugin
	ctx context.Context

	mu      sync.Mutex
	replica *replica
	rconn   *sql.Conn
	pconn   *sql.Conn
	buffer  []bufferedStmt
	inTx    bool // an explicit BEGIN is open on the primary
	// temp are the temporary tables the session created on the replica:
	// writing only those is session state (BUFFER), not a write.
	temp      map[string]bool
	txWritten writeSet
	// schema is the schema change of the statement running (its mark
	// recorded before it runs: schema_changes.go).
	schema writeSet
	abort  error
}

type bufferedStmt struct {
	query string
	args  []any
}

var (
	_ gorm.ConnPool         = (*replaySession)(nil)
	_ gorm.ConnPoolBeginner = (*replaySession)(nil)
)

// start pins a usable replica that has replayed the caller's own writes,
// or starts on the primary when there is none.
func (s *replaySession) start(ctx context.Context) error {
	var required = s.sessionPosition()
	for _, r := range s.p.replicas() {
		st := r.state.Load()
		if st.usable(time.Now(), s.p.cfg.MaxLag) && st.pos.Covers(required) && r.enter() {
			conn, err := r.db.Conn(ctx)
			r.leave() // the session holds the connection
			if err != nil {
				continue
			}
			s.replica, s.rconn = r, conn
			return nil
		}
	}
	return s.toPrimary(ctx)
}

func (s *replaySession) sessionPosition() lsnstore.Position {
	if ss := SessionFrom(s.ctx); ss != nil {
		return s.p.sessionPosition(s.ctx, ss)
	}
	return lsnstore.Position{}
}

func (s *replaySession) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rconn != nil {
		s.rconn.Close()
		s.rconn = nil
	}
	if s.pconn != nil {
		if s.inTx {
			_, _ = s.pconn.ExecContext(context.Background(), "ROLLBACK")
		}
		s.pconn.Close()
		s.pconn = nil
	}
}

// toPrimary takes a primary connection and replays the buffer. Called with
// s.mu held (or before the session is shared).
func (s *replaySession) toPrimary(ctx context.Context) error {
	if s.pconn != nil {
		return nil
	}
	if s.abort != nil {
		return s.abort
	}
	conn, err := s.p.primaryDB.Conn(ctx)
	if err != nil {
		return fmt.Errorf("plugin: session: connect to the primary: %w", err)
	}
	for i, b := range s.buffer {
		if _, err := conn.ExecContext(ctx, b.query, b.args...); err != nil {
			conn.Close()
			s.abort = fmt.Errorf("%w: replaying buffered statement %d on the primary: %w", ErrSessionAborted, i+1, err)
			return s.abort
		}
	}
	s.buffer = nil
	s.pconn = conn
	if s.rconn != nil {
		s.rconn.Close()
		s.rconn = nil
	}
	return nil
}

// target decides where query runs and prepares that connection.
func (s *replaySession) target(ctx context.Context, query string, args []any) (conn *sql.Conn, c rawClass, buffer bool, err error) {
	if s.abort != nil {
		return nil, c, false, s.abort
	}
	c = s.p.classify(query)
	if c.kind == kindWrite {
		s.schema = s.p.schemaChange(ctx, query)
	}
	if s.pconn == nil && c.kind == kindWrite && s.onlyTemp(c.writes) {
		c.kind = kindBuffer
	}
	if s.pconn == nil {
		if end, _ := txEnd(query); end {
			// Ends a READ ONLY transaction begun on the replica: it stays
			// there, and the finished BEGIN is not replayed later.
			for i := len(s.buffer) - 1; i >= 0; i-- {
				if begin, _ := txStart(s.buffer[i].query); begin {
					s.buffer = append(s.buffer[:i], s.buffer[i+1:]...)
					break
				}
			}
			return s.rconn, c, false, nil
		}
		switch {
		case c.kind == kindWrite:
			err = s.toPrimary(ctx)
		case c.kind == kindBuffer:
			if begin, readOnly := txStart(query); begin && !readOnly {
				err = s.toPrimary(ctx)
			} else {
				return s.rconn, c, true, nil
			}
		case c.locks:
			err = s.toPrimary(ctx)
		default:
			if !s.replicaFresh(ctx, c, args) {
				err = s.toPrimary(ctx)
			} else {
				return s.rconn, c, false, nil
			}
		}
		if err != nil {
			return nil, c, false, err
		}
	}
	return s.pconn, c, false, nil
}

// onlyTemp reports whether writes names only temporary tables of the
// session.
func (s *replaySession) onlyTemp(writes []string) bool {
	if len(writes) == 0 || len(s.temp) == 0 {
		return false
	}
	for _, w := range writes {
		if !s.temp[w] {
			return false
		}
	}
	return true
}

// noteTemp records a temporary table created by query.
func (s *replaySession) noteTemp(query string) {
	if name, ok := tempTableName(query); ok {
		if s.temp == nil {
			s.temp = map[string]bool{}
		}
		s.temp[name] = true
	}
}

// tempTableName returns the table a CREATE TEMP[ORARY] TABLE creates.
func tempTableName(query string) (string, bool) {
	w := strings.Fields(query)
	i := 0
	next := func() string {
		if i < len(w) {
			i++
			return strings.ToUpper(w[i-1])
		}
		return ""
	}
	if next() != "CREATE" {
		return "", false
	}
	t := next()
	if t == "GLOBAL" || t == "LOCAL" {
		t = next()
	}
	if t != "TEMP" && t != "TEMPORARY" || next() != "TABLE" {
		return "", false
	}
	if i+2 < len(w) && strings.EqualFold(w[i], "IF") && strings.EqualFold(w[i+1], "NOT") && strings.EqualFold(w[i+2], "EXISTS") {
		i += 3
	}
	if i >= len(w) {
		return "", false
	}
	name, _, _ := strings.Cut(w[i], "(")
	if name == "" {
		return "", false
	}
	return lsnstore.TableKey(name), true
}

// replicaFresh reports whether the pinned replica has replayed what a read
// of c's tables needs.
func (s *replaySession) replicaFresh(ctx context.Context, c rawClass, args []any) bool {
	st := s.replica.state.Load()
	if !st.usable(time.Now(), s.p.cfg.MaxLag) || s.p.pending.suspect.Load() {
		return false
	}
	required := s.sessionPosition()
	if consistencyFrom(ctx, s.p.cfg.Consistency) == Table {
		tables := c.reads
		if !c.readsKnown {
			tables = nil
		}
		if s.p.cfg.keyed() && len(tables) == 1 {
			if names, ok := s.p.rawKeyedReadNames(ctx, c.pinned, tables[0], args); ok {
				tables = names
			}
		}
		pos, err := s.p.tablesPosition(ctx, tables)
		if err != nil {
			return false
		}
		required = required.Merge(pos)
	}
	return st.pos.Covers(required)
}

// autocommitWrite reports whether afterPrimary publishes c as soon as it
// has run: a write outside a transaction. Run as a query, its result is
// read in full first (buffered_rows.go): the server commits it only after
// sending its last row.
func (s *replaySession) autocommitWrite(c rawClass) bool {
	return !s.inTx && c.kind == kindWrite && (c.writes == nil || len(c.writes) > 0)
}

// afterPrimary tracks transactions and publishes writes run on the primary.
func (s *replaySession) afterPrimary(ctx context.Context, query string, args []any, c rawClass, err error) {
	if begin, _ := txStart(query); begin {
		if err == nil {
			s.inTx = true
		}
		return
	}
	if end, commit := txEnd(query); end {
		w := s.txWritten
		s.inTx, s.txWritten = false, writeSet{}
		switch {
		case !commit:
			s.p.endSchemaMarks(ctx, w.marks)
		case w.empty():
		case err == nil:
			s.p.publish(ctx, w)
		case commitOutcomeUnknown(err):
			// It may have committed: as a trackedTx's Commit does.
			s.p.unpublished(ctx, w, time.Now())
		}
		return
	}
	if c.kind != kindWrite || (c.writes != nil && len(c.writes) == 0) {
		return
	}
	names := s.p.rawWriteNames(ctx, c, args)
	schema := s.schema
	s.schema = writeSet{}
	if s.inTx {
		s.txWritten.add(names)
		s.txWritten.merge(schema)
		return
	}
	var w writeSet
	w.add(names)
	w.merge(schema)
	s.p.publish(ctx, w) // autocommit: published even on error (it may have committed)
}

// onReplicaError moves to the primary when the replica refused a BUFFER
// statement as read-only; ok reports whether to run it again there.
func (s *replaySession) onReplicaError(ctx context.Context, err error) bool {
	if !s.p.engine.readOnlyRefusal(err) {
		return false
	}
	return s.toPrimary(ctx) == nil
}

func (s *replaySession) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	conn, c, buffer, err := s.target(ctx, query, args)
	if err != nil {
		return nil, err
	}
	res, err := conn.ExecContext(ctx, query, args...)
	if conn == s.rconn && s.pconn == nil {
		if err != nil && buffer && s.onReplicaError(ctx, err) {
			res, err = s.pconn.ExecContext(ctx, query, args...)
			s.afterPrimary(ctx, query, args, c, err)
			return res, err
		}
		if err == nil && buffer {
			s.buffer = append(s.buffer, bufferedStmt{query: query, args: args})
			s.noteTemp(query)
		}
		return res, err
	}
	s.afterPrimary(ctx, query, args, c, err)
	return res, err
}

func (s *replaySession) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	conn, c, buffer, err := s.target(ctx, query, args)
	if err != nil {
		return nil, err
	}
	if conn == s.pconn && s.autocommitWrite(c) {
		res := queryResult(ctx, conn, query, args)
		s.afterPrimary(ctx, query, args, c, res.err)
		return s.p.rowsOf(ctx, res)
	}
	rows, err := conn.QueryContext(ctx, query, args...)
	if conn == s.rconn && s.pconn == nil {
		if err != nil && buffer && s.onReplicaError(ctx, err) {
			rows, err = s.pconn.QueryContext(ctx, query, args...)
			s.afterPrimary(ctx, query, args, c, err)
			return rows, err
		}
		if err == nil && buffer {
			s.buffer = append(s.buffer, bufferedStmt{query: query, args: args})
		}
		return rows, err
	}
	s.afterPrimary(ctx, query, args, c, err)
	return rows, err
}

func (s *replaySession) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	s.mu.Lock()
	defer s.mu.Unlock()
	conn, c, buffer, err := s.target(ctx, query, args)
	if err != nil {
		// *sql.Row cannot carry our error: return a row whose error is the
		// context's, and Session returns s.abort when fn ends.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		return s.p.primaryDB.QueryRowContext(cctx, query, args...)
	}
	if conn == s.pconn && s.autocommitWrite(c) {
		res := queryResult(ctx, conn, query, args)
		s.afterPrimary(ctx, query, args, c, res.err)
		return s.p.rowOf(ctx, res)
	}
	row := conn.QueryRowContext(ctx, query, args...)
	if conn == s.rconn && s.pconn == nil {
		if buffer && row.Err() == nil {
			s.buffer = append(s.buffer, bufferedStmt{query: query, args: args})
		}
		return row
	}
	s.afterPrimary(ctx, query, args, c, row.Err())
	return row
}

func (s *replaySession) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A prepared statement could be executed later as a write: prepare on
	// the primary.
	if err := s.toPrimary(ctx); err != nil {
		return nil, err
	}
	return s.pconn.PrepareContext(ctx, query)
}

// BeginTx moves the session to the primary and begins a transaction there
// (GORM's default transaction, db.Transaction, Begin): its commit publishes
// like any other.
func (s *replaySession) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.toPrimary(ctx); err != nil {
		return nil, err
	}
	tx, err := s.pconn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &trackedTx{Tx: tx, ctx: ctx, p: s.p}, nil
}

// txStart reports whether query is BEGIN / START TRANSACTION, and whether
// it is READ ONLY.
func txStart(query string) (begin, readOnly bool) {
	w := strings.Fields(strings.ToUpper(strings.TrimRight(strings.TrimSpace(query), ";")))
	if len(w) == 0 || !(w[0] == "BEGIN" || (w[0] == "START" && len(w) > 1 && w[1] == "TRANSACTION")) {
		return false, false
	}
	for i := 1; i+1 < len(w); i++ {
		if strings.TrimRight(w[i], ",") == "READ" && strings.TrimRight(w[i+1], ",") == "ONLY" {
			return true, true
		}
	}
	return true, false
}

// txEnd reports whether query ends a transaction, and whether it commits.
// ROLLBACK TO SAVEPOINT does not end it.
func txEnd(query string) (end, commit bool) {
	w := strings.Fields(strings.ToUpper(strings.TrimRight(strings.TrimSpace(query), ";")))
	if len(w) == 0 {
		return false, false
	}
	switch w[0] {
	case "COMMIT", "END":
		return !(len(w) > 1 && w[1] == "PREPARED"), true
	case "ROLLBACK", "ABORT":
		for _, x := range w[1:] {
			if x == "TO" || x == "PREPARED" {
				return false, false
			}
		}
		return true, false
	}
	return false, false
}
