package plugin

import (
	"database/sql"
	"sync"

	"gorm.io/gorm"
)

// A connection pinned with db.Connection may run a transaction by raw SQL
// (Exec("BEGIN") ... Exec("COMMIT")), which GORM does not see as one: its
// statements run on the *sql.Conn, outside any transaction GORM knows.
// The plugin follows such a transaction by its statements' text, as a
// replay session does: the writes made in it are kept, and published
// once its COMMIT has run (nothing after a ROLLBACK), not when each
// statement ends, which is before the commit.
//
// Not followed: a transaction opened otherwise (MariaDB's
// SET autocommit = 0, a BEGIN inside a multi-statement text), and the
// implicit commit of DDL on MariaDB and MySQL.

// pinnedTx is the state of a raw transaction on one pinned connection.
type pinnedTx struct {
	mu sync.Mutex
	w  writeSet
}

// pinnedTxKey keys, in Statement.Settings, what a statement on a pinned
// connection does to its raw transaction, for afterPinned.
type pinnedTxKey struct{ stmt *gorm.Statement }

// pinnedTxStep is what a statement does to its connection's transaction.
type pinnedTxStep int

const (
	pinnedBegin pinnedTxStep = iota + 1
	pinnedCommit
	pinnedRollback
)

// followPinned notes, before a statement on a pinned connection runs,
// whether it begins or ends a raw transaction.
func (p *Plugin) followPinned(db *gorm.DB, query string) {
	var step pinnedTxStep
	if begin, _ := txStart(query); begin {
		step = pinnedBegin
	} else if end, commit := txEnd(query); end {
		step = pinnedRollback
		if commit {
			step = pinnedCommit
		}
	} else {
		return
	}
	db.Statement.Settings.Store(pinnedTxKey{db.Statement}, step)
}

// pinnedTxOf is the raw transaction open on conn, if any.
func (p *Plugin) pinnedTxOf(conn *sql.Conn) (*pinnedTx, bool) {
	v, ok := p.pinnedTxs.Load(conn)
	if !ok {
		return nil, false
	}
	return v.(*pinnedTx), true
}

// afterPinned runs once a statement on a pinned connection has run: a
// BEGIN that succeeded opens the connection's transaction; a COMMIT
// publishes what it wrote (also when the COMMIT's outcome is unknown: it
// may have committed); a ROLLBACK drops it.
func (p *Plugin) afterPinned(db *gorm.DB, conn *sql.Conn) {
	v, ok := db.Statement.Settings.LoadAndDelete(pinnedTxKey{db.Statement})
	if !ok {
		return
	}
	step := v.(pinnedTxStep)
	if step == pinnedBegin {
		if db.Error == nil {
			p.pinnedTxs.Store(conn, &pinnedTx{})
		}
		return
	}
	tx, open := p.pinnedTxs.LoadAndDelete(conn)
	if !open || step != pinnedCommit {
		return
	}
	t := tx.(*pinnedTx)
	t.mu.Lock()
	w := t.w
	t.mu.Unlock()
	switch {
	case w.empty():
	case db.Error == nil:
		p.publish(db.Statement.Context, w)
	case commitOutcomeUnknown(db.Error):
		p.unpublished(db.Statement.Context, w)
	}
}

// keepPinnedWrite keeps a write made inside the raw transaction open on
// conn, for its COMMIT; ok false when none is open.
func (p *Plugin) keepPinnedWrite(conn *sql.Conn, tables []string) bool {
	t, ok := p.pinnedTxOf(conn)
	if !ok {
		return false
	}
	t.mu.Lock()
	t.w.add(tables)
	t.mu.Unlock()
	return true
}
