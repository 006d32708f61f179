package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/freshread/freshread/internal/lib/sqlerr"
	"github.com/freshread/freshread/lsnstore"
)

// Writer tags (docs/design/reliability.md, "A COMMIT that outlives its
// lease"). On PostgreSQL through pgx with no pooler in between, a
// connection to the primary holds, while it commits a write of this
// process, a shared advisory lock (namespace, tag) naming the process's
// current member in the store's leases set (lsnstore.LeaseTagger):
//
//   - a transaction the plugin begins takes it for the transaction
//     (pg_advisory_xact_lock_shared) in its BEGIN's message: no round trip
//     of its own; the COMMIT or ROLLBACK releases it;
//   - an autocommit write takes it for the session in a round trip before
//     the statement, and releases it after the statement in the same
//     statement that reads the position to publish;
//   - a transaction run by raw SQL on a pinned connection, and one the
//     plugin begins as a *sql.Tx (a prepared pool made at Open: no folded
//     BEGIN), takes it for the transaction in a round trip before its
//     COMMIT;
//   - a transaction GORM begins on a pinned connection (a *sql.Tx whose
//     COMMIT the plugin does not see) takes it for the transaction in a
//     round trip before its first write (again when the member changed).
//
// A write is fenced (fenceWrite) only once its connection holds the tag
// of the member whose lease the fence checks, so the lock was granted
// before the lease it was fenced under ended. Another process ends every
// connection holding the tag of a member the store removed for having
// lapsed before it takes the primary's position as its floor
// (writer_fence.go): a COMMIT through it has then either committed below
// that position or never will. Connections that only read hold no tag
// and are never ended.

// writerTags is the plugin's tagging state.
type writerTags struct {
	tagger  lsnstore.LeaseTagger // nil: connections are not tagged
	queries atomic.Pointer[tagQueries]
	sqlTx   sqlTxTags
	// maria: the tags are MariaDB user locks named after the connection,
	// which keeps them until the member changes (writer_tag_mariadb.go).
	maria  bool
	mconns connValues[uint32]
	// xactOnly: a pooler in transaction mode is in front of the primary
	// (or one of unknown mode): only transactions take tags, for the
	// transaction; a session lock would stay with a server connection that
	// other clients go on to use, so autocommit writes from the pool or a
	// pinned connection run in a transaction of the plugin's own
	// (own_tx.go), and the others (statements that cannot run in a
	// transaction block; a pinned connection's behind a pooler of unknown
	// mode) go untagged.
	xactOnly bool
}

// sqlTxTags remembers the tag each open *sql.Tx took last (transactions
// GORM began on a pinned connection), forgotten when the *sql.Tx is
// collected.
type sqlTxTags struct {
	m sync.Map // weak.Pointer[sql.Tx] -> uint32
}

// held is the tag tx took last (0: none).
func (s *sqlTxTags) held(tx *sql.Tx) uint32 {
	if v, ok := s.m.Load(weak.Make(tx)); ok {
		return v.(uint32)
	}
	return 0
}

// remember records that tx took tag.
func (s *sqlTxTags) remember(tx *sql.Tx, tag uint32) {
	k := weak.Make(tx)
	if _, loaded := s.m.Swap(k, tag); !loaded {
		runtime.AddCleanup(tx, func(k weak.Pointer[sql.Tx]) { s.m.Delete(k) }, k)
	}
}

// initWriterTags turns tagging on when the store's leases tag writers and
// the primary is PostgreSQL through pgx with native positions, or MariaDB
// with native positions (maria). Behind a pooler in transaction mode, or
// of a mode not known, only transactions are tagged (xactOnly).
func (p *Plugin) initWriterTags(maria bool) {
	if !maria && !p.pgxPrimary {
		return
	}
	if _, ok := p.leaser(); !ok {
		return
	}
	if t, ok := p.cfg.Store.(lsnstore.LeaseTagger); ok {
		p.tags.tagger = t
		p.tags.maria = maria
		p.tags.xactOnly = !maria && !p.primaryPIDs && p.primaryTxPooled
	}
}

// tagLock returns the statement that takes the current tag, for the
// transaction (xact) or the session, and the tag; "" (and 0) when
// tagging is off or no member of this process is surely in the store (the
// first poll, a new member being created, a lease that may have ended: a
// process verifying then would end the connection; the fence takes the
// tag once the lease is known again).
func (p *Plugin) tagLock(xact bool) (string, uint32) {
	tg := p.tags.tagger
	if tg == nil {
		return "", 0
	}
	if l, _ := p.leaser(); !time.Now().Before(l.LeaseUntil()) {
		// Ended, or about to: the store may have removed the member
		// already, and the others end its connections.
		return "", 0
	}
	ns, tag := tg.LeaseTag()
	q := p.tags.queries.Load()
	if q == nil || q.tag != tag {
		// Built once per member, not per transaction.
		nq := &tagQueries{tag: tag}
		if p.tags.maria {
			prev := uint32(0)
			if q != nil {
				prev = q.tag
			}
			nq.session = mariaTagQuery(ns, tag, prev)
			nq.xact = nq.session
		} else {
			nq.session = fmt.Sprintf("SELECT pg_advisory_lock_shared(%d, %d)", int32(ns), int32(tag))
			// The transaction's form also names the server process
			// (pg_backend_pid): behind a pooler the connection's own
			// PID is the pooler's (abandoned_commit.go).
			nq.xact = fmt.Sprintf("SELECT pg_backend_pid() FROM pg_advisory_xact_lock_shared(%d, %d)", int32(ns), int32(tag))
		}
		q = nq
		p.tags.queries.Store(q)
	}
	if xact {
		return q.xact, tag
	}
	return q.session, tag
}

// tagQueries are the statements that take one tag.
type tagQueries struct {
	tag           uint32
	session, xact string
}

// takeTag takes the current tag on conn (xact: for its transaction) in a
// round trip, and returns it (0: none taken).
func (p *Plugin) takeTag(ctx context.Context, conn *sql.Conn, xact bool) (uint32, error) {
	q, tag := p.tagLock(xact)
	if q == "" {
		return 0, nil
	}
	if p.tags.maria {
		return p.takeMariaTag(ctx, connKey(conn), conn.QueryRowContext)
	}
	if err := onPgConn(conn, func(pgc *pgconn.PgConn) error {
		_, err := pgc.Exec(ctx, q).ReadAll()
		return err
	}); err != nil {
		return 0, fmt.Errorf("plugin: tag the primary connection with this process's lease: %w", err)
	}
	return tag, nil
}

// takeTagTx takes the current tag on tx's connection for the
// transaction, in a round trip, and returns it (0: none taken) and, on
// PostgreSQL, the server process the transaction runs in (0: not known):
// a transaction the plugin began as a *sql.Tx (a prepared pool made at
// Open), or one GORM began on a pinned connection.
func (p *Plugin) takeTagTx(ctx context.Context, tx *sql.Tx) (tag, backend uint32, err error) {
	q, tag := p.tagLock(true)
	if q == "" {
		return 0, 0, nil
	}
	if p.tags.maria {
		return tag, 0, mariaTake(tx.QueryRowContext(ctx, q))
	}
	var pid int64
	if err := tx.QueryRowContext(ctx, q).Scan(&pid); err != nil {
		return 0, 0, fmt.Errorf("plugin: tag the primary connection with this process's lease: %w", err)
	}
	return tag, uint32(pid), nil
}

// currentTag is the tag of this process's current lease member.
func (p *Plugin) currentTag() uint32 {
	_, tag := p.tags.tagger.LeaseTag()
	return tag
}

// fenceTagged is fenceWrite for a write through a tagged connection: held
// is the tag the connection holds (0: none), take takes the current one.
// The fence passes only when the connection holds the tag of the member
// whose lease it checked; a new member created meanwhile (the lease had
// lapsed) is taken once more.
func (p *Plugin) fenceTagged(ctx context.Context, held uint32, take func() (uint32, error)) error {
	for range 3 {
		if held == 0 || held != p.currentTag() {
			tag, err := take()
			if err != nil {
				if sqlerr.EndedByOther(err) {
					// Ended by another process (writer_fence.go):
					// before the commit, so nothing committed.
					return fmt.Errorf("%w (another process ended this connection to the primary: this process's lease in the store had lapsed); retry when the store is reachable: %w", ErrStoreUnreachable, err)
				}
				return err
			}
			held = tag
		}
		if err := p.fenceWrite(ctx); err != nil {
			return err
		}
		if held != 0 && held == p.currentTag() {
			return nil
		}
	}
	return fmt.Errorf("%w (this process's lease in the store was replaced while a write was being fenced); retry when the store is reachable", ErrStoreUnreachable)
}

// lapseError is err, from a statement of a transaction that holds tag
// (0: none) before its COMMIT, as a refused write (ErrStoreUnreachable)
// when it says that another process ended the connection (SQLSTATE 57P01)
// and the tag's lease may have lapsed (another member since, or its lease
// not known to hold): the other process ended it for that
// (writer_fence.go), and nothing of the transaction committed.
func (p *Plugin) lapseError(err error, tag uint32) error {
	if err == nil || tag == 0 || p.tags.tagger == nil || !sqlerr.EndedByOther(err) {
		return err
	}
	if l, _ := p.leaser(); tag == p.currentTag() && time.Now().Before(l.LeaseUntil()) {
		return err
	}
	return fmt.Errorf("%w (another process ended this connection to the primary because this process's lease in the store lapsed; the transaction did not commit); retry when the store is reachable: %w", ErrStoreUnreachable, err)
}
