package plugin

import (
	"database/sql"
	"runtime"
	"sync"
	"time"
	"weak"

	"gorm.io/gorm"

	"github.com/freshread/freshread/classify"
)

// A connection pinned with db.Connection may run a transaction by raw SQL
// (Exec("BEGIN") ... Exec("COMMIT")), which GORM does not see as one: its
// statements run on the *sql.Conn, outside any transaction GORM knows.
// The plugin follows such a transaction by its statements' text, as a
// replay session does: the writes made in it are kept, and published
// once its COMMIT has run (nothing after a ROLLBACK), not when each
// statement ends, which is before the commit.
//
// MariaDB and MySQL also run transactions that no BEGIN opens and no
// COMMIT ends: after SET autocommit = 0 every statement is in one, until
// COMMIT, ROLLBACK or SET autocommit = 1; and a transaction ends by an
// implicit commit before DDL, LOCK TABLES, a BEGIN and many other
// statements. The plugin follows autocommit, and treats every statement
// it does not know to leave a transaction open (anything but DML, SELECT,
// SET, savepoints and the like; on PostgreSQL, a text of several
// statements that ends or begins a transaction) as one that may commit:
// it publishes the transaction's writes after it runs and keeps them for
// the next COMMIT, and from then on until the transaction's end publishes
// each write when its statement ends and keeps it too (uncertain). Any
// of these orders publishes after the commit that made a write visible;
// publishing before it as well only costs a raise.

// MariaDB's and MySQL's XA transactions are followed the same way: XA
// START (or XA BEGIN) opens one, XA COMMIT publishes its writes once the
// commit made them visible (XA PREPARE does not), XA ROLLBACK drops them.
// An XA COMMIT of a transaction prepared on another connection has none
// kept here: as a write of unnamed tables it publishes the database-wide
// position itself.

// pinnedTx is the state of a raw transaction on one pinned connection.
type pinnedTx struct {
	mu sync.Mutex
	w  writeSet
	// autocommitOff: SET autocommit = 0 ran; a COMMIT or ROLLBACK leaves
	// the next transaction open.
	autocommitOff bool
	// uncertain: a statement that may have committed or begun a
	// transaction ran; a write is published when its statement ends, and
	// kept for the next COMMIT.
	uncertain bool
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
	pinnedAutocommitOff
	pinnedAutocommitOn
	pinnedMayCommit // may commit (implicitly), or begin, a transaction
)

// followPinned notes, before a statement on a pinned connection runs,
// whether it begins or ends a raw transaction.
func (p *Plugin) followPinned(db *gorm.DB, query string) {
	step := p.pinnedStep(query)
	if step == pinnedCommit || step == pinnedMayCommit {
		if conn, ok := db.Statement.ConnPool.(*sql.Conn); ok && p.fencePinnedCommit(db, conn) {
			return
		}
	}
	if step != 0 {
		db.Statement.Settings.Store(pinnedTxKey{db.Statement}, step)
	}
}

// pinnedStep is what query does to its connection's transaction, 0 for
// nothing.
func (p *Plugin) pinnedStep(query string) pinnedTxStep {
	ws := statementWords(query) // one scan of the text for every question below
	if len(ws) > 1 {
		if txControlWord(ws) || p.mysqlFamily() {
			return pinnedMayCommit
		}
		return 0
	}
	if begin, _ := txStart(query); begin {
		if compoundBlock(ws) {
			return pinnedMayCommit // MariaDB's BEGIN NOT ATOMIC ... END
		}
		return pinnedBegin
	}
	if end, commit := txEnd(query); end {
		if commit {
			return pinnedCommit
		}
		return pinnedRollback
	}
	if !p.mysqlFamily() || len(ws) == 0 {
		return 0
	}
	if ws[0][0] == "XA" {
		return xaStep(ws[0])
	}
	if on, set, known := setsAutocommit(ws[0]); set {
		switch {
		case !known:
			return pinnedMayCommit
		case on:
			return pinnedAutocommitOn
		}
		return pinnedAutocommitOff
	}
	if leavesTxOpen(ws[0]) {
		return 0
	}
	return pinnedMayCommit
}

// xaStep is what an XA statement (its words) does to its connection's
// transaction: START and BEGIN open one, COMMIT and ROLLBACK end it; END,
// PREPARE and RECOVER leave it open.
func xaStep(w []string) pinnedTxStep {
	if len(w) < 2 {
		return pinnedMayCommit
	}
	switch w[1] {
	case "START", "BEGIN":
		return pinnedBegin
	case "COMMIT":
		return pinnedCommit
	case "ROLLBACK":
		return pinnedRollback
	case "END", "PREPARE", "RECOVER":
		return 0
	}
	return pinnedMayCommit
}

// mysqlFamily reports whether the primary is MariaDB or MySQL.
func (p *Plugin) mysqlFamily() bool { return p.classifier.Dialect() == classify.MySQL }

// pinnedTxOf is the raw transaction open on conn, if any.
func (p *Plugin) pinnedTxOf(conn *sql.Conn) (*pinnedTx, bool) {
	v, ok := p.pinnedTxs.Load(weak.Make(conn))
	if !ok {
		return nil, false
	}
	return v.(*pinnedTx), true
}

// storePinnedTx opens t as conn's raw transaction. An entry whose
// connection is closed and dropped with its transaction open (a
// db.Connection that ended inside one) goes with the connection.
func (p *Plugin) storePinnedTx(conn *sql.Conn, t *pinnedTx) {
	key := weak.Make(conn)
	p.pinnedTxs.Store(key, t)
	if _, seen := p.pinnedConns.LoadOrStore(key, struct{}{}); !seen {
		runtime.AddCleanup(conn, func(k weak.Pointer[sql.Conn]) {
			p.pinnedTxs.Delete(k)
			p.pinnedConns.Delete(k)
		}, key)
	}
}

// afterPinned runs once a statement on a pinned connection has run: a
// BEGIN that succeeded opens the connection's transaction; a COMMIT
// publishes what it wrote (also when the COMMIT's outcome is unknown: it
// may have committed); a ROLLBACK drops it; autocommit and statements that
// may commit as the comment at the top of this file says.
func (p *Plugin) afterPinned(db *gorm.DB, conn *sql.Conn) {
	v, ok := db.Statement.Settings.LoadAndDelete(pinnedTxKey{db.Statement})
	if !ok {
		return
	}
	step := v.(pinnedTxStep)
	t, open := p.pinnedTxOf(conn)
	switch step {
	case pinnedBegin, pinnedAutocommitOff:
		if db.Error != nil && !open {
			return
		}
		if !open {
			t = &pinnedTx{}
			p.storePinnedTx(conn, t)
		}
		t.mu.Lock()
		var w writeSet // a BEGIN in a transaction commits it on MariaDB and MySQL
		w.merge(t.w)
		if step == pinnedBegin {
			t.uncertain = false
		} else {
			t.autocommitOff = true
		}
		t.mu.Unlock()
		p.publishPinned(db, w)
		return
	case pinnedMayCommit:
		if !open {
			t = &pinnedTx{}
			p.storePinnedTx(conn, t)
		}
		t.mu.Lock()
		if prev, ok := db.Statement.Settings.Load(autocommitKey{db.Statement}); ok {
			t.w.merge(prev.(writeSet)) // this statement's own, published when it ends too
		}
		var w writeSet
		w.merge(t.w)
		t.uncertain = true
		t.mu.Unlock()
		p.publishPinned(db, w)
		return
	}
	if !open {
		return
	}
	t.mu.Lock()
	w := t.w
	t.w = writeSet{}
	t.uncertain = false
	keep := t.autocommitOff && step != pinnedAutocommitOn
	if !keep {
		p.pinnedTxs.Delete(weak.Make(conn))
	}
	t.mu.Unlock()
	if step == pinnedRollback {
		p.endSchemaMarks(db.Statement.Context, w.marks)
		return
	}
	p.publishPinned(db, w)
}

// publishPinned publishes w after a statement that may have committed it
// (also when its outcome is unknown: it may have committed).
func (p *Plugin) publishPinned(db *gorm.DB, w writeSet) {
	switch {
	case w.empty():
	case db.Error == nil:
		p.publish(db.Statement.Context, w)
	case commitOutcomeUnknown(db.Error):
		p.unpublished(db.Statement.Context, w, time.Now())
	default:
		p.publish(db.Statement.Context, w) // an implicit commit runs before the statement fails
	}
}

// keepPinnedWrite keeps a write made inside the raw transaction open on
// conn, for its COMMIT; false when none is open, or when the transaction
// is uncertain: the statement publishes it when it ends too.
func (p *Plugin) keepPinnedWrite(conn *sql.Conn, w writeSet) bool {
	t, ok := p.pinnedTxOf(conn)
	if !ok {
		return false
	}
	w.schemaAfter = w.schemaAfter || w.schema // the graph predates the commit
	t.mu.Lock()
	defer t.mu.Unlock()
	t.w.merge(w)
	return !t.uncertain
}
