package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"sync"
	"weak"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/freshread/freshread/lsnstore"
)

// Writer tags (docs/design/reliability.md, "A COMMIT that outlives its
// lease"). On PostgreSQL through pgx with no pooler in between, every
// connection to the primary through which this process commits a write
// holds a session-level shared advisory lock, (namespace, tag), naming the
// process's current member in the store's leases set
// (lsnstore.LeaseTagger). The lock is taken once per connection and
// member: in the BEGIN message of a folded transaction (no round trip of
// its own), and by one statement before the first autocommit write on a
// connection. A write is fenced (fenceWrite) only once its connection
// holds the current tag, so the tag was taken before the lease it was
// fenced under ended. Another process that finds a lease lapsed ends
// every connection holding a tag the store no longer lists before it
// takes the primary's position as its floor (writer_fence.go): a COMMIT
// through it has then either committed below that position or never
// will.

// writerTags is the plugin's tagging state.
type writerTags struct {
	tagger lsnstore.LeaseTagger // nil: connections are not tagged
	// held maps a primary connection (weakly) to the tag it holds.
	held sync.Map // weak.Pointer[pgconn.PgConn] -> uint32
}

// initWriterTags turns tagging on when the store's leases tag writers and
// the primary's connections are pgx's, reach their server processes
// directly (a pooler in transaction mode would give the lock to whichever
// server connection ran it) and fold their commits.
func (p *Plugin) initWriterTags() {
	if !p.foldCommit || !p.primaryPIDs {
		return
	}
	if _, ok := p.leaser(); !ok {
		return
	}
	if t, ok := p.cfg.Store.(lsnstore.LeaseTagger); ok {
		p.tags.tagger = t
	}
}

// tagQuery returns the statement that makes pgc hold the current tag, and
// that tag; "" when pgc holds it already (or tagging is off).
func (p *Plugin) tagQuery(pgc *pgconn.PgConn) (string, uint32) {
	tg := p.tags.tagger
	if tg == nil {
		return "", 0
	}
	if l, _ := p.leaser(); l.LeaseUntil().IsZero() {
		// No member known to be in the store yet (the first poll, or a
		// new member being created): a process verifying now would end
		// the connection. The commit's fence tags it.
		return "", 0
	}
	ns, tag := tg.LeaseTag()
	old, ok := p.tags.held.Load(weak.Make(pgc))
	if ok && old.(uint32) == tag {
		return "", tag
	}
	q := fmt.Sprintf("SELECT pg_advisory_lock_shared(%d, %d)", int32(ns), int32(tag))
	if ok {
		q = fmt.Sprintf("SELECT pg_advisory_unlock_shared(%d, %d), pg_advisory_lock_shared(%d, %d)", int32(ns), int32(old.(uint32)), int32(ns), int32(tag))
	}
	return q, tag
}

// noteTag records that pgc holds tag.
func (p *Plugin) noteTag(pgc *pgconn.PgConn, tag uint32) {
	k := weak.Make(pgc)
	if _, loaded := p.tags.held.Swap(k, tag); !loaded {
		runtime.AddCleanup(pgc, func(k weak.Pointer[pgconn.PgConn]) { p.tags.held.Delete(k) }, k)
	}
}

// forgetTag records that pgc's tag is unknown (a statement that took it
// failed).
func (p *Plugin) forgetTag(pgc *pgconn.PgConn) { p.tags.held.Delete(weak.Make(pgc)) }

// tagConn makes pgc hold the current tag, in a round trip when it does
// not yet, and returns the tag.
func (p *Plugin) tagConn(ctx context.Context, pgc *pgconn.PgConn) (uint32, error) {
	q, tag := p.tagQuery(pgc)
	if q == "" {
		return tag, nil
	}
	if _, err := pgc.Exec(ctx, q).ReadAll(); err != nil {
		p.forgetTag(pgc)
		return 0, fmt.Errorf("plugin: tag the primary connection with this process's lease: %w", err)
	}
	p.noteTag(pgc, tag)
	return tag, nil
}

// currentTag is the tag of this process's current lease member.
func (p *Plugin) currentTag() uint32 {
	_, tag := p.tags.tagger.LeaseTag()
	return tag
}

// fenceTagged is fenceWrite for a write through a tagged connection: tag
// makes the connection hold the current tag (and returns it); the fence
// passes only when the connection holds the tag of the member whose lease
// it checked. A new member created meanwhile (the lease had lapsed) is
// tagged once more.
func (p *Plugin) fenceTagged(ctx context.Context, tag func() (uint32, error)) error {
	for range 2 {
		held, err := tag()
		if err != nil {
			return err
		}
		if err := p.fenceWrite(ctx); err != nil {
			return err
		}
		if held == p.currentTag() {
			return nil
		}
	}
	return fmt.Errorf("%w (this process's lease in the store was replaced twice while a write was being fenced); retry when the store is reachable", ErrStoreUnreachable)
}

// taggedKey marks, in Statement.Settings, an autocommit write sent
// through a tagged connection.
type taggedKey struct{ stmt *gorm.Statement }

// taggedConn is the pool of an autocommit write sent from the primary's
// pool while tagging is on: a connection of that pool, tagged, pinned for
// the statement (and the statements GORM runs inside it, such as its
// associations'); the statement that pinned it returns it
// (releaseTagged). A transaction begun on it is begun on the pool, as
// before.
type taggedConn struct {
	conn  *sql.Conn
	pool  *primaryPool
	owner *gorm.Statement
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

// taggedWrite is what Statement.Settings holds under taggedKey: the
// pinned connection the statement returns when it ends (nil when an
// enclosing statement pinned it).
type taggedWrite struct{ pinned *taggedConn }

// fenceAutocommitTagged fences an autocommit write on a tagged
// connection: the primary's pool's (pinned for the statement), a
// connection already pinned so, or one the caller pinned
// (db.Connection). It reports whether it handled the write's fence
// (false: tagging is off, or the pool is another), and the fence's error.
func (p *Plugin) fenceAutocommitTagged(db *gorm.DB) (bool, error) {
	if p.tags.tagger == nil {
		return false, nil
	}
	stmt := db.Statement
	ctx := stmt.Context
	var (
		conn   *sql.Conn
		pinned *taggedConn
	)
	switch c := stmt.ConnPool.(type) {
	case *primaryPool:
		sc, err := c.db.Conn(ctx)
		if err != nil {
			return true, err
		}
		pinned = &taggedConn{conn: sc, pool: c, owner: stmt}
		stmt.ConnPool, conn = pinned, sc
	case *taggedConn:
		conn = c.conn
	case *sql.Conn:
		conn = c
	default:
		return false, nil
	}
	stmt.Settings.Store(taggedKey{stmt}, taggedWrite{pinned: pinned})
	return true, p.fenceTagged(ctx, p.tagSQLConn(ctx, conn))
}

// tagSQLConn returns fenceTagged's tag function for conn, a connection of
// the primary's pool.
func (p *Plugin) tagSQLConn(ctx context.Context, conn *sql.Conn) func() (uint32, error) {
	return func() (uint32, error) {
		var tag uint32
		err := onPgConn(conn, func(pgc *pgconn.PgConn) error {
			var err error
			tag, err = p.tagConn(ctx, pgc)
			return err
		})
		return tag, err
	}
}

// releaseTagged returns the connection the statement pinned for its
// autocommit write, and reports whether the write went through a tagged
// connection.
func (p *Plugin) releaseTagged(db *gorm.DB) bool {
	v, ok := db.Statement.Settings.LoadAndDelete(taggedKey{db.Statement})
	if !ok {
		return false
	}
	if c := v.(taggedWrite).pinned; c != nil {
		if db.Statement.ConnPool == gorm.ConnPool(c) {
			db.Statement.ConnPool = c.pool
		}
		_ = c.conn.Close()
	}
	return true
}
