package plugin

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/freshread/freshread/lsnstore"
)

// Folded commit (PostgreSQL through pgx, native positions). A transaction
// the plugin begins runs on a *sql.Conn on which the plugin itself sends
// BEGIN, and its COMMIT and the position read go to the server as one
// simple-query message:
//
//	COMMIT; SELECT pg_current_wal_insert_lsn()::text
//
// In one message, statements after a COMMIT run in a new implicit
// transaction, after the commit record was written (and, with
// synchronous_commit on, flushed): the position read is at or past the
// commit, as when it is read in a second round trip, for one round trip
// instead of two. A COMMIT that fails stops the message, and a COMMIT of
// a failed transaction answers ROLLBACK: neither publishes.

// foldedCommitQuery ends a transaction and reads the position after it.
const foldedCommitQuery = "COMMIT; SELECT pg_current_wal_insert_lsn()::text"

// foldsCommit reports whether the primary's connections are pgx's, so
// that transactions can fold the position read into COMMIT.
func foldsCommit(ctx context.Context, db *sql.DB) bool {
	conn, err := db.Conn(ctx)
	if err != nil {
		return false
	}
	defer conn.Close()
	ok := false
	_ = conn.Raw(func(dc any) error {
		_, ok = dc.(*stdlib.Conn)
		return nil
	})
	return ok
}

// beginStatement is the BEGIN for opts, as pgx's stdlib spells it.
func beginStatement(opts *sql.TxOptions) (string, error) {
	if opts == nil {
		return "BEGIN", nil
	}
	s := "BEGIN"
	switch opts.Isolation {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		s += " ISOLATION LEVEL READ UNCOMMITTED"
	case sql.LevelReadCommitted:
		s += " ISOLATION LEVEL READ COMMITTED"
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		s += " ISOLATION LEVEL REPEATABLE READ"
	case sql.LevelSerializable:
		s += " ISOLATION LEVEL SERIALIZABLE"
	default:
		return "", fmt.Errorf("plugin: unsupported isolation level %v", opts.Isolation)
	}
	if opts.ReadOnly {
		s += " READ ONLY"
	}
	return s, nil
}

// beginFolded begins a transaction on a connection of its own.
func (p *Plugin) beginFolded(ctx context.Context, db *sql.DB, opts *sql.TxOptions) (*trackedTx, error) {
	begin, err := beginStatement(opts)
	if err != nil {
		return nil, err
	}
	var (
		conn    *sql.Conn
		backend uint32
		tag     uint32
	)
	// A BEGIN on a connection found closed is sent again on another (up
	// to twice, as database/sql retries a bad connection): another process
	// may have ended this process's connections (writer_fence.go).
	for attempt := 0; ; attempt++ {
		if conn, err = db.Conn(ctx); err != nil {
			return nil, err
		}
		var closed bool
		if backend, tag, closed, err = p.sendBegin(ctx, conn, begin); err == nil {
			break
		}
		conn.Close()
		if !closed || attempt == 2 || ctx.Err() != nil {
			return nil, err
		}
	}
	t := &trackedTx{conn: conn, ctx: ctx, p: p, tag: tag, backend: backend}
	// Like database/sql's Tx: a transaction whose context ends is rolled
	// back (and its connection returned), whether or not anyone ends it.
	// The watch runs in a goroutine of its own, started by whoever cancels
	// the context, which nothing orders after this function: it must not
	// read stopWatch, written below.
	t.stopWatch = context.AfterFunc(ctx, func() {
		if t.ended.CompareAndSwap(false, true) {
			_, _ = t.closeFolded(rollbackFolded)
		}
	})
	return t, nil
}

// sendBegin sends BEGIN on conn, with the writer tag for the transaction
// in the same message (writer_tag.go). It returns the server process the
// transaction runs in (0: not known), the tag taken (0: none) and whether
// the connection was found closed. Straight to the primary, the server
// process is the connection's PID; behind a pooler (whose PIDs are its
// own) the message asks for it (pg_backend_pid: the tag's statement
// returns it), and a pooler in transaction mode keeps that server
// connection for the transaction.
func (p *Plugin) sendBegin(ctx context.Context, conn *sql.Conn, begin string) (backend, tag uint32, closed bool, err error) {
	q, tg := p.tagLock(true)
	err = onPgConn(conn, func(pgc *pgconn.PgConn) error {
		defer func() { closed = pgc.IsClosed() }()
		msg := begin
		switch {
		case q != "":
			msg += "; " + q
		case !p.primaryPIDs:
			msg += "; SELECT pg_backend_pid()"
		}
		res, err := pgc.Exec(ctx, msg).ReadAll()
		if err != nil {
			if msg != begin {
				_, _ = pgc.Exec(ctx, "ROLLBACK").ReadAll()
			}
			return err
		}
		if q != "" {
			tag = tg
		}
		if p.primaryPIDs {
			backend = pgc.PID()
		} else {
			backend = resultPID(res)
		}
		return nil
	})
	return backend, tag, closed, err
}

// resultPID is the server process ID the last result of a message holds
// (its first row's first column), 0 when it holds none.
func resultPID(res []*pgconn.Result) uint32 {
	if len(res) == 0 {
		return 0
	}
	last := res[len(res)-1]
	if len(last.Rows) == 0 || len(last.Rows[0]) == 0 {
		return 0
	}
	pid, err := strconv.ParseUint(string(last.Rows[0][0]), 10, 32)
	if err != nil {
		return 0
	}
	return uint32(pid)
}

// onPgConn runs f on conn's pgx connection; f's error is returned as it
// is. A connection f leaves closed is discarded (one left inside a
// transaction is discarded by pgx's ResetSession when it returns to the
// pool).
func onPgConn(conn *sql.Conn, f func(*pgconn.PgConn) error) error {
	var err error
	rawErr := conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			err = fmt.Errorf("plugin: folded commit on a %T connection, want pgx's", dc)
			return nil
		}
		pgc := sc.Conn().PgConn()
		err = f(pgc)
		if pgc.IsClosed() {
			return driver.ErrBadConn
		}
		return nil
	})
	if err == nil && rawErr != nil {
		err = rawErr
	}
	return err
}

// rollbackFolded ends a transaction without keeping anything.
func rollbackFolded(ctx context.Context, pgc *pgconn.PgConn) (lsnstore.Position, error) {
	_, err := pgc.Exec(ctx, "ROLLBACK").ReadAll()
	return lsnstore.Position{}, err
}

// commitFolded commits and reads the position after the commit in one
// round trip. errPosition wraps a failure to read the position of a
// transaction that did commit.
func commitFolded(ctx context.Context, pgc *pgconn.PgConn) (lsnstore.Position, error) {
	results, err := pgc.Exec(ctx, foldedCommitQuery).ReadAll()
	if err != nil {
		if len(results) > 0 && results[0].Err == nil && results[0].CommandTag.String() == "COMMIT" {
			return lsnstore.Position{}, fmt.Errorf("%w: %w", errPosition, err)
		}
		return lsnstore.Position{}, err
	}
	if len(results) != 2 {
		return lsnstore.Position{}, fmt.Errorf("plugin: folded commit returned %d results, want 2", len(results))
	}
	if results[0].CommandTag.String() == "ROLLBACK" {
		return lsnstore.Position{}, pgx.ErrTxCommitRollback
	}
	if len(results[1].Rows) != 1 || len(results[1].Rows[0]) != 1 {
		return lsnstore.Position{}, fmt.Errorf("%w: no row", errPosition)
	}
	l, err := lsnstore.ParseLSN(string(results[1].Rows[0][0]))
	if err != nil {
		return lsnstore.Position{}, fmt.Errorf("%w: %w", errPosition, err)
	}
	return lsnstore.PositionOf(l), nil
}

// errPosition: the transaction committed but its position could not be
// read; the write is published later (pendingWrites).
var errPosition = errors.New("plugin: committed, but the position after the commit could not be read")

// endFolded ends a folded transaction once with end (commit or rollback)
// and returns its connection to the pool. It is called by the
// transaction's user, after beginFolded returned; the context's watch
// calls closeFolded.
func (t *trackedTx) endFolded(end func(context.Context, *pgconn.PgConn) (lsnstore.Position, error)) error {
	if !t.ended.CompareAndSwap(false, true) {
		return sql.ErrTxDone
	}
	t.stopWatch()
	var err error
	t.foldedPos, err = t.closeFolded(end)
	return err
}

// closeFolded runs end on the transaction's connection and returns the
// connection to the pool; the caller has set ended.
func (t *trackedTx) closeFolded(end func(context.Context, *pgconn.PgConn) (lsnstore.Position, error)) (lsnstore.Position, error) {
	defer t.conn.Close()
	ctx := context.WithoutCancel(t.ctx)
	ctx, cancel := context.WithTimeout(ctx, t.p.cfg.PublishTimeout)
	defer cancel()
	var pos lsnstore.Position
	err := onPgConn(t.conn, func(pgc *pgconn.PgConn) error {
		var err error
		pos, err = end(ctx, pgc)
		return err
	})
	t.closeStmts() // on the connection, before it goes back to the pool
	return pos, err
}
