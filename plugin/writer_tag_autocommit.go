package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/lib/sqlerr"
	"github.com/freshread/freshread/lsnstore"
)

// Writer tags of autocommit writes (writer_tag.go): a write sent outside a
// transaction takes the tag for the session on its connection (one of the
// primary's pool pinned for the statement, or the caller's own from
// db.Connection) before its fence, and releases it after the statement in
// the statement that reads the position to publish it with.

// taggedKey keys, in Statement.Settings, the taggedWrite of an autocommit
// write.
type taggedKey struct{ stmt *gorm.Statement }

// taggedWrite is an autocommit write's tag: the connection that holds it
// for the session, the tags taken there (released after the statement),
// and the connection pinned from the pool for the statement (nil: the
// caller's own, db.Connection), which the statement returns.
type taggedWrite struct {
	conn   *sql.Conn
	tags   []uint32
	pinned *taggedConn
}

// taggedConn is the pool of an autocommit write sent from the primary's
// pool while tagging is on: a connection of that pool, pinned for the
// statement (and the statements GORM runs inside it, such as its
// associations'). A transaction begun on it is begun on the pool, as
// before.
type taggedConn struct {
	conn *sql.Conn
	pool *primaryPool
	// orig is the statement's pool before it was pinned (the primary's
	// pool, or GORM's prepared-statement pool over it), given back after.
	orig gorm.ConnPool
}

var (
	_ gorm.ConnPoolBeginner = (*taggedConn)(nil)
	_ gorm.GetDBConnector   = (*taggedConn)(nil)
)

func (c *taggedConn) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return c.pool.PrepareContext(ctx, query)
}

func (c *taggedConn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return c.conn.ExecContext(ctx, query, args...)
}

func (c *taggedConn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return c.conn.QueryContext(ctx, query, args...)
}

func (c *taggedConn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return c.conn.QueryRowContext(ctx, query, args...)
}

func (c *taggedConn) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	return c.pool.BeginTx(ctx, opts)
}

func (c *taggedConn) GetDBConn() (*sql.DB, error) { return c.pool.db, nil }

// fenceAutocommitTagged fences an autocommit write through a tagged
// connection: one of the primary's pool pinned for the statement, or one
// the caller pinned (db.Connection). It reports whether it handled the
// write's fence (false: tagging is off, or the pool is another, such as a
// connection an enclosing statement pinned, whose tag holds), and the
// fence's error.
func (p *Plugin) fenceAutocommitTagged(db *gorm.DB) (bool, error) {
	if p.tags.tagger == nil {
		return p.fenceAutocommitPinned(db)
	}
	stmt := db.Statement
	ctx := stmt.Context
	tw := &taggedWrite{}
	if _, inTx := stmt.ConnPool.(*sql.Tx); p.tags.xactOnly && !inTx {
		return false, nil // a session lock would outlive the statement's server connection
	}
	switch c := stmt.ConnPool.(type) {
	case *primaryPool, *gorm.PreparedStmtDB:
		// The statement runs on a connection pinned from the pool; one
		// sent through a prepared pool made at Open runs there
		// unprepared by GORM (pgx caches it on the connection).
		pp := primaryPoolOf(c)
		if pp == nil {
			return false, nil
		}
		return true, p.fencePinnedTagged(db, pp)
	case *sql.Tx:
		// A transaction GORM began on a pinned connection: each write
		// takes the tag for the transaction, once per member.
		return true, p.fenceTagged(ctx, p.tags.sqlTx.held(c), func() (uint32, error) {
			tag, _, err := p.takeTagTx(ctx, c)
			if tag != 0 {
				p.tags.sqlTx.remember(c, tag)
			}
			return tag, err
		})
	case *sql.Conn:
		tw.conn = c
	case *taggedConn:
		if _, ok := stmt.Settings.Load(taggedKey{stmt}); ok {
			return false, nil
		}
		// A statement inside one that pinned the connection (an
		// association): it holds the tag until the outer one ends.
		return true, p.fenceWrite(ctx)
	default:
		return false, nil
	}
	stmt.Settings.Store(taggedKey{stmt}, tw)
	return true, p.fenceTagged(ctx, 0, tw.take(ctx, p))
}

// fenceAutocommitPinned is fenceAutocommitTagged while tagging is off (a
// store without writer tags, such as the in-memory one): on PostgreSQL
// through pgx straight to the primary, an autocommit write still runs on
// a connection pinned for it (or the caller's own, db.Connection), so
// that a write its client gave up on is held on its server process
// (abandonedBackend) rather than published before it may commit. It
// takes no tag; the position is read at the next poll, as without one.
func (p *Plugin) fenceAutocommitPinned(db *gorm.DB) (bool, error) {
	if !p.pgxPrimary || !p.primaryPIDs {
		return false, nil
	}
	stmt := db.Statement
	ctx := stmt.Context
	if c, ok := stmt.ConnPool.(*sql.Conn); ok {
		stmt.Settings.Store(taggedKey{stmt}, &taggedWrite{conn: c})
		return true, p.fenceWrite(ctx)
	}
	pool := primaryPoolOf(stmt.ConnPool)
	if pool == nil {
		return false, nil
	}
	if _, err := pinWrite(stmt, pool, stmt.ConnPool); err != nil {
		return true, err
	}
	return true, p.fenceWrite(ctx)
}

// pinWrite pins a connection of pool for an autocommit write: the
// statement runs on it (orig is its pool before, given back by
// endTagged), and its taggedWrite is remembered in the statement.
func pinWrite(stmt *gorm.Statement, pool *primaryPool, orig gorm.ConnPool) (*taggedWrite, error) {
	sc, err := pool.db.Conn(stmt.Context)
	if err != nil {
		return nil, err
	}
	tw := &taggedWrite{conn: sc, pinned: &taggedConn{conn: sc, pool: pool, orig: orig}}
	stmt.ConnPool = tw.pinned
	stmt.Settings.Store(taggedKey{stmt}, tw)
	return tw, nil
}

// primaryPoolOf is the primary's pool a statement's pool sends to: the
// pool itself, or GORM's prepared-statement pool made at Open over it
// (nil: another pool).
func primaryPoolOf(c gorm.ConnPool) *primaryPool {
	switch c := c.(type) {
	case *primaryPool:
		return c
	case *gorm.PreparedStmtDB:
		pp, _ := c.ConnPool.(*primaryPool)
		return pp
	}
	return nil
}

// abandonedBackend is the server process of the connection a failed
// autocommit write went through tagged, when the client gave up on it
// there: pgx closes a connection whose statement it abandons (its
// context ended, the network failed), and keeps one whose statement the
// server answered or that sent nothing (a GORM or hook error before it).
// 0: the outcome is known, or the process is not (no tagged connection,
// or a pooler in between, whose PIDs are its own).
func (p *Plugin) abandonedBackend(db *gorm.DB) uint32 {
	v, ok := db.Statement.Settings.Load(taggedKey{db.Statement})
	if !ok || !p.primaryPIDs {
		return 0
	}
	var pid uint32
	_ = onPgConn(v.(*taggedWrite).conn, func(pgc *pgconn.PgConn) error {
		if pgc.IsClosed() {
			pid = pgc.PID()
		}
		return nil
	})
	return pid
}

// take returns fenceTagged's function that takes the current tag for
// the session on the write's connection, remembering it for endTagged.
func (tw *taggedWrite) take(ctx context.Context, p *Plugin) func() (uint32, error) {
	return func() (uint32, error) {
		tag, err := p.takeTag(ctx, tw.conn, false)
		if tag != 0 {
			tw.tags = append(tw.tags, tag)
		}
		return tag, err
	}
}

// fencePinnedTagged is fenceAutocommitTagged for a write sent from the
// primary's pool: it pins a connection for the statement. A connection
// found ended by another process when the tag is taken (it ended the
// connections of this process's lapsed lease as one went back to the
// pool) is dropped for another, up to twice: the write was not sent.
func (p *Plugin) fencePinnedTagged(db *gorm.DB, pool *primaryPool) error {
	stmt := db.Statement
	ctx := stmt.Context
	orig := stmt.ConnPool
	for attempt := 0; ; attempt++ {
		tw, err := pinWrite(stmt, pool, orig)
		if err != nil {
			return err
		}
		err = p.fenceTagged(ctx, 0, tw.take(ctx, p))
		if err == nil || !sqlerr.EndedByOther(err) || attempt == 2 || ctx.Err() != nil {
			return err
		}
		p.endTagged(db, false) // returns the ended connection
	}
}

// endTagged releases an autocommit write's tags and returns the
// connection it pinned; with read, in the same statement it reads the
// primary's position, after the statement's commit, to publish the write
// with. It reports whether the write went through a tagged connection
// (false: read nothing). On MariaDB it releases and reads nothing.
func (p *Plugin) endTagged(db *gorm.DB, read bool) (pos lsnstore.Position, tagged bool, err error) {
	v, ok := db.Statement.Settings.LoadAndDelete(taggedKey{db.Statement})
	if !ok {
		return lsnstore.Position{}, false, nil
	}
	tw := v.(*taggedWrite)
	if tw.pinned != nil {
		defer func() {
			if db.Statement.ConnPool == gorm.ConnPool(tw.pinned) {
				db.Statement.ConnPool = tw.pinned.orig
			}
			_ = tw.conn.Close()
		}()
	}
	if (len(tw.tags) == 0 && !read) || p.tags.maria || p.tags.tagger == nil {
		// MariaDB: the connection keeps its tag (writer_tag_mariadb.go),
		// and the position is read as without tags.
		return lsnstore.Position{}, len(tw.tags) > 0, nil
	}
	ns, _ := p.tags.tagger.LeaseTag()
	cols := make([]string, 0, len(tw.tags)+1)
	for _, tag := range tw.tags {
		cols = append(cols, fmt.Sprintf("pg_advisory_unlock_shared(%d, %d)", int32(ns), int32(tag)))
	}
	if read {
		cols = append(cols, "pg_current_wal_insert_lsn()::text")
	}
	ctx, cancel := p.publishContext(db.Statement.Context)
	defer cancel()
	var text string
	err = onPgConn(tw.conn, func(pgc *pgconn.PgConn) error {
		res, err := pgc.Exec(ctx, "SELECT "+strings.Join(cols, ", ")).ReadAll()
		if err != nil {
			return err
		}
		if read {
			if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != len(cols) {
				return fmt.Errorf("%w: no row", errPosition)
			}
			text = string(res[0].Rows[0][len(cols)-1])
		}
		return nil
	})
	if !read {
		return lsnstore.Position{}, len(tw.tags) > 0, nil
	}
	if err != nil {
		return lsnstore.Position{}, len(tw.tags) > 0, err
	}
	l, err := lsnstore.ParseLSN(text)
	if err != nil {
		return lsnstore.Position{}, len(tw.tags) > 0, err
	}
	return lsnstore.PositionOf(l), len(tw.tags) > 0, nil
}
