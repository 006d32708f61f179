package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
)

// A transaction the plugin did not begin (db.Connection, then Begin on the
// pinned *sql.Conn) commits where the plugin cannot see it. Its writes are
// therefore held, with this process reading from the primary, until the
// poller sees the transaction end; the poller then publishes them with a
// position read after that, so at or past the commit.
//
// The write is held before the statement runs; after it, the engine
// identifies the transaction from inside it (txWatcher.txID), and from
// then on the poller asks the primary whether it has ended (txEnded).

// txWatcher is an engine that can follow a transaction it did not begin.
type txWatcher interface {
	// txID identifies the transaction q runs in; called inside it, after
	// a write.
	txID(ctx context.Context, q gorm.ConnPool) (string, error)
	// txEnded reports, asked on the primary, whether the transaction has
	// committed or rolled back.
	txEnded(ctx context.Context, primary *sql.DB, id string) (bool, error)
	// txCheckInterval is the least time between two txEnded calls.
	txCheckInterval() time.Duration
}

// foreignWrite is a write held until its transaction ends.
type foreignWrite struct {
	w  writeSet
	id atomic.Pointer[string] // set once identified; the poller waits until then
	// since is when an abandoned COMMIT's write was held
	// (abandoned_commit.go); zero for other writes.
	since time.Time
}

// foreignKey keys, in Statement.Settings, the foreign write a statement
// registered, for identifyForeignWrite after the statement.
type foreignKey struct{ stmt *gorm.Statement }

// holdForeignWrite records a write inside a transaction the plugin did not
// begin, before the statement runs. Without a txWatcher the write is
// pending like an unpublished one, and published at the next poll, which
// may come before the commit: logged once.
func (p *Plugin) holdForeignWrite(db *gorm.DB, w writeSet) {
	if p.foreignTxDenied != nil {
		p.endSchemaMarks(db.Statement.Context, w.marks)
		db.AddError(fmt.Errorf("%w: %v", ErrForeignTransaction, p.foreignTxDenied))
		return
	}
	if _, ok := p.engine.(txWatcher); !ok {
		p.foreignTxWarning.Do(func() {
			p.cfg.Logger.Warn("freshread: write inside a transaction not begun through the plugin's pool (db.Connection?) that cannot be followed; it is published at the next poll, possibly before it commits: use db.Transaction or Begin")
		})
		p.pending.add(w)
		return
	}
	fw := &foreignWrite{w: w}
	p.pending.hold(fw)
	db.Statement.Settings.Store(foreignKey{db.Statement}, fw)
}

// identifyForeignWrite runs after the statement that registered fw: the
// engine identifies the transaction, and the poller may wait for its end.
// When it cannot (the statement wrote nothing transactional, or the
// transaction is gone), the write is pending like an unpublished one.
func (p *Plugin) identifyForeignWrite(db *gorm.DB, fw *foreignWrite) {
	tw := p.engine.(txWatcher)
	id, err := tw.txID(db.Statement.Context, db.Statement.ConnPool)
	if err == nil {
		fw.id.Store(&id)
		return
	}
	// A privilege revoked since Initialize (checkForeignTxPrivilege), a
	// table outside InnoDB (its write is committed already), or an
	// INNODB_TRX cache that other readers keep from refreshing.
	p.cfg.Logger.Warn("freshread: cannot identify a transaction not begun through the plugin; its write is published at the next poll, which may come before it commits: begin transactions with db.Transaction or Begin, and check the role's PROCESS privilege (err says why)", "err", err)
	p.pending.release(fw)
}

// releaseEndedForeign moves the held writes whose transactions ended to
// the pending writes (poller only).
func (p *Plugin) releaseEndedForeign(ctx context.Context) {
	tw, ok := p.engine.(txWatcher)
	if !ok || p.pending.holding.Load() == 0 {
		return
	}
	now := time.Now()
	if now.Sub(p.foreignCheckedAt) < tw.txCheckInterval() {
		return
	}
	p.foreignCheckedAt = now
	for _, fw := range p.pending.heldWrites() {
		id := fw.id.Load()
		if id == nil {
			continue // its statement is still running
		}
		ended, err := false, error(nil)
		if backend, ok := strings.CutPrefix(*id, abandonedPrefix); ok {
			ended, err = p.abandonedEnded(ctx, fw, backend, now)
		} else if thread, ok := strings.CutPrefix(*id, abandonedThreadPrefix); ok {
			ended, err = p.abandonedThreadEnded(ctx, fw, thread, now)
		} else {
			ended, err = tw.txEnded(ctx, p.primaryDB, *id)
		}
		if err == nil && ended {
			p.pending.release(fw)
		}
	}
}

// PostgreSQL: the transaction ID (txid_current() assigns one if needed),
// and txid_status on the primary.
func (pgEngine) txID(ctx context.Context, q gorm.ConnPool) (string, error) {
	var id int64
	err := q.QueryRowContext(ctx, "SELECT txid_current()").Scan(&id)
	return strconv.FormatInt(id, 10), err
}

func (pgEngine) txCheckInterval() time.Duration { return 0 }

// txEnded: txid_status is 'in progress' until the commit (or abort) is
// recorded; NULL (too old to know) counts as ended.
func (pgEngine) txEnded(ctx context.Context, primary *sql.DB, id string) (bool, error) {
	var status sql.NullString
	if err := primary.QueryRowContext(ctx, "SELECT txid_status($1::bigint)", id).Scan(&status); err != nil {
		return false, err
	}
	return status.String != "in progress", nil
}

// MariaDB and MySQL: the InnoDB transaction ID, which a transaction has
// once it has written. INNODB_TRX lists the transaction until it has
// committed, after its commit is in the binary log. InnoDB serves
// INNODB_TRX from a cache that it refreshes only when the previous read is
// more than 0.1 s old, so the plugin asks at most every
// mysqlTxCheckInterval; a monitor that reads INNODB_TRX more often than
// every 0.1 s freezes the cache: a transaction it lists stays held (this
// process then reads from the primary) until the monitor stops, and one it
// does not list yet cannot be identified (below).
const mysqlTxCheckInterval = 250 * time.Millisecond

// The cache also makes the first read after a write ambiguous: a cache
// refreshed before the transaction started (by anyone's read less than
// 0.1 s earlier: another process's poller, its start-up check) does not
// list it yet. Every InnoDB transaction is listed once the cache is
// refreshed, so mysqlTxID asks again after the cache's refresh interval,
// up to mysqlTxIDTries times, instead of taking a missing row for a
// transaction that wrote nothing.
const (
	mysqlTxIDTries = 8
	mysqlTxIDRetry = 110 * time.Millisecond // past InnoDB's 0.1 s
)

func mysqlTxID(ctx context.Context, q gorm.ConnPool) (string, error) {
	var id string
	var err error
	for try := 0; try < mysqlTxIDTries; try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(mysqlTxIDRetry):
			}
		}
		err = q.QueryRowContext(ctx, "SELECT trx_id FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = CONNECTION_ID()").Scan(&id)
		if !errors.Is(err, sql.ErrNoRows) {
			return id, err
		}
	}
	return "", err
}

func mysqlTxEnded(ctx context.Context, primary *sql.DB, id string) (bool, error) {
	var n int
	err := primary.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_id = ?", id).Scan(&n)
	return n == 0, err
}
