package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/callbacks"
)

// autocommitKey keys, in Statement.Settings, the tables an autocommit write
// touched, from the statement's start to its end. A one-pointer struct: no
// allocation on the read path's Load.
type autocommitKey struct{ stmt *gorm.Statement }

// hooks is the plugin's side of callbacks.Freshness: package callbacks
// registers it on GORM's chains (where each runs: its documentation).
type hooks struct{ p *Plugin }

var _ callbacks.Freshness = hooks{}

func (h hooks) RouteRead(db *gorm.DB)         { h.p.routeRead(db) }
func (h hooks) WriteOnPrimary(db *gorm.DB)    { h.p.writeOnPrimary(db) }
func (h hooks) MarkModelWrite(db *gorm.DB)    { h.p.markModelWrite(db) }
func (h hooks) MarkModelKeys(db *gorm.DB)     { h.p.markModelKeys(db) }
func (h hooks) MarkRawWrite(db *gorm.DB)      { h.p.markRawWrite(db) }
func (h hooks) PublishAutocommit(db *gorm.DB) { h.p.publishAutocommit(db) }
func (h hooks) RetryOnPrimary(db *gorm.DB)    { h.p.retryOnPrimary(db) }
func (h hooks) RelearnAfterDDL(db *gorm.DB)   { h.p.relearnAfterDDL(db) }

// retryOnPrimary runs a read (Query and Row chains: Find, Scan, Rows)
// again on the primary when it failed on a replica with a connection error
// or a recovery conflict, also, on the Query chain, when the failure came
// while the rows streamed (a conflict cancels a running query), which the
// replica pool cannot see. Reads only: writes never run on a replica pool.
//
// A read that failed on the primary with a connection error is run again
// once, on another of its connections: a connection another process ended
// (writer_fence.go: this process's lease had lapsed) fails the statement
// that next uses it before it runs.
func (p *Plugin) retryOnPrimary(db *gorm.DB) {
	if db.Error == nil || !p.engine.retryable(db.Statement.Context, db.Error) {
		return
	}
	switch pool := db.Statement.ConnPool.(type) {
	case *replicaPool:
		p.replicaFailed(db.Statement.Context, pool.r, db.Error)
	case *primaryPool:
		if pool != p.primary {
			return
		}
		if _, write := db.Statement.Settings.Load(autocommitKey{db.Statement}); write {
			return
		}
	default:
		return
	}
	// gorm:row leaves the *sql.Rows it could not open in Dest, and drops
	// the "rows" setting that made it open them.
	_, rows := db.Statement.Dest.(*sql.Rows)
	db.Error = nil
	db.RowsAffected = 0
	db.Statement.ConnPool = db.ConnPool
	if rows {
		if row := db.Callback().Row().Get("gorm:row"); row != nil {
			db.Statement.Settings.Store("rows", true)
			row(db) // the SQL is built already: the same statement runs again
		}
		return
	}
	if query := db.Callback().Query().Get("gorm:query"); query != nil {
		query(db) // the SQL is built already: the same statement runs again
	}
}

// writeOnPrimary puts a write on the primary when its statement carries a
// replica's pool: GORM copies Statement.ConnPool into every statement
// derived from one (a chain reused after Find, a Session taken from it,
// the statements of an association), and only the read chains route.
func (p *Plugin) writeOnPrimary(db *gorm.DB) {
	p.demand(false)
	if _, ok := replicaOf(db.Statement.ConnPool); ok {
		db.Statement.ConnPool = db.ConnPool
	}
}

// replicaOf is the replica whose pool reads were routed to, when pool is
// one (a replica's, or an overlapped read's on its candidate replica).
func replicaOf(pool gorm.ConnPool) (*replica, bool) {
	switch rp := pool.(type) {
	case *replicaPool:
		return rp.r, true
	case *overlapPool:
		return rp.cand, true
	}
	return nil, false
}

// refuseWrite is the error of a write that reached replica r's pool,
// logged: it is a bug, never a routing decision.
func (p *Plugin) refuseWrite(ctx context.Context, r *replica) error {
	p.cfg.Logger.ErrorContext(ctx, "freshread: a write reached a replica's pool; refused before it was sent", "replica", r.name)
	return fmt.Errorf("%w %q", ErrWriteOnReplica, r.name)
}

// markModelWrite records the table a Create/Update/Delete writes. By
// key (unless TablePositions), a write of a table with an integer key
// records the table's position alone (lsnstore.SignedKeyedTable);
// markModelKeys adds the keys or the unkeyed position once the statement
// has run.
func (p *Plugin) markModelWrite(db *gorm.DB) {
	if db.Error != nil {
		return
	}
	if r, ok := replicaOf(db.Statement.ConnPool); ok {
		// Put there after writeOnPrimary (by another callback): refused
		// before the statement is sent.
		db.AddError(p.refuseWrite(db.Statement.Context, r))
		return
	}
	if p.fenceUnseenCommit(db) {
		return
	}
	var tables []string // nil: unknown, the database-wide position
	if name, ok := statementTable(db.Statement); ok {
		tables = []string{name}
		if p.cfg.keyed() {
			if kw, ok := p.keyable(db, name); ok {
				db.Statement.Settings.Store(keyedKey{db.Statement}, kw)
				tables = []string{p.signedTable(name, kw.sig)}
			}
		}
	}
	p.recordWrite(db, tables)
}

// keyedKey keys, in Statement.Settings, the keyedWriteOf of a write whose
// keys markModelKeys records.
type keyedKey struct{ stmt *gorm.Statement }

// keyedWriteOf is a keyed write's table and the key signature it is keyed
// by. fromSQL: the statement's model does not name the table's integer
// primary key (db.Table, a map), so its keys are read from the SQL GORM
// built (keys_table.go), pk being the key the signature was made with.
type keyedWriteOf struct {
	table, sig string
	pk         *keyDef
	fromSQL    bool
}

// keyable returns how a write is keyed, when its keys can be recorded
// after it ran: a model with an integer key, else a table whose integer
// primary key the plugin knows (knownKey: from a model or the catalog),
// else a model of a table with KeyColumns; on an autocommit statement or
// a transaction the plugin began, by a process whose signature for the
// table is the one in force (keys_signature.go).
func (p *Plugin) keyable(db *gorm.DB, table string) (keyedWriteOf, bool) {
	tn := p.tableNames(table)
	kw := keyedWriteOf{table: table}
	if pk, ok := integerKey(db.Statement); ok {
		kw.pk = p.modelKey(tn, table, pk.DBName)
	} else if pk, ok := p.knownKey(tn, table); ok {
		kw.pk, kw.fromSQL = pk, true
	} else if len(p.cfg.KeyColumns[table]) == 0 {
		return keyedWriteOf{}, false
	}
	if !keyableConn(db) {
		return keyedWriteOf{}, false
	}
	kw.sig = p.signatureOf(tn, table, kw.pk)
	if !p.keysAgreed(db.Statement.Context, tn, table, kw.sig) {
		return keyedWriteOf{}, false
	}
	return kw, true
}

// keyableConn reports whether a write on the statement's connection may
// record keys: autocommit or a transaction the plugin began (a foreign
// transaction or a replay session publishes by table).
func keyableConn(db *gorm.DB) bool {
	pool := db.Statement.ConnPool
	if ptx, ok := pool.(*gorm.PreparedStmtTX); ok {
		pool = ptx.Tx
	}
	switch pool.(type) {
	case *trackedTx:
		return true
	case *replaySession, gorm.TxCommitter:
		return false
	}
	return true
}

// markModelKeys records the keys a keyed write touched, or, when it
// proved none (or failed: it may have written anyway), the table's
// unkeyed position.
func (p *Plugin) markModelKeys(db *gorm.DB) {
	if !p.cfg.keyed() {
		return
	}
	v, ok := db.Statement.Settings.LoadAndDelete(keyedKey{db.Statement})
	if !ok {
		return
	}
	kw := v.(keyedWriteOf)
	if db.Error == nil {
		var (
			names []string
			ok    bool
		)
		if kw.fromSQL || hasClause(db.Statement, "INSERT") && mapRows(db.Statement) {
			// No model, or a Create from maps: the INSERT GORM built.
			names, ok = p.builtWriteNames(db.Statement, kw)
		} else {
			names, ok = p.keyedWriteNames(db.Statement, kw.table, kw.sig)
		}
		if ok {
			p.recordWrite(db, names[1:])
			return
		}
	}
	p.recordWrite(db, []string{kw.table})
}

// markRawWrite records the tables an Exec writes. Exec always runs on the
// primary (it is db.ConnPool); a statement that only reads marks nothing.
func (p *Plugin) markRawWrite(db *gorm.DB) {
	if db.Error != nil {
		return
	}
	p.demand(false)
	if _, pinned := db.Statement.ConnPool.(*sql.Conn); pinned {
		p.followPinned(db, db.Statement.SQL.String())
	}
	c := p.classify(db.Statement.SQL.String())
	if c.kind == kindRead {
		return
	}
	if c.kind == kindWrite && (c.writes == nil || len(c.writes) > 0) {
		if p.fenceUnseenCommit(db) {
			return
		}
		p.recordRawWrite(db, c)
	}
}

// recordRawWrite records a raw write: by key when it proves them
// (keys_raw.go) on a connection that may, by table otherwise.
func (p *Plugin) recordRawWrite(db *gorm.DB, c rawClass) {
	if p.cfg.keyed() && keyableConn(db) {
		p.recordWrite(db, p.rawWriteNames(db.Statement.Context, c, db.Statement.Vars))
		return
	}
	p.recordWrite(db, c.writes)
}

// recordWrite attaches a write to the transaction that will publish it
// after COMMIT, or to the statement, which publishes it when it ends.
func (p *Plugin) recordWrite(db *gorm.DB, tables []string) {
	p.traceWrite(db.Statement.Context, tables)
	var w writeSet
	w.add(tables)
	pool := db.Statement.ConnPool
	if _, ok := pool.(*replaySession); !ok {
		w.merge(p.schemaChange(db.Statement.Context, db.Statement.SQL.String()))
	}
	if ptx, ok := pool.(*gorm.PreparedStmtTX); ok {
		if tt, ok := ptx.Tx.(*trackedTx); ok {
			pool = tt // a transaction of GORM's prepared-statement pool
		}
	}
	switch c := pool.(type) {
	case *trackedTx:
		c.mark(w)
	case *replaySession:
		// The session classifies and publishes each statement it runs.
	case gorm.TxCommitter:
		// A transaction the plugin did not begin (db.Connection + Begin on a
		// *sql.Conn): held until the poller sees it end (foreign_tx.go).
		w.schemaAfter = w.schemaAfter || w.schema
		p.holdForeignWrite(db, w)
	case *sql.Conn:
		if p.keepPinnedWrite(c, w) {
			return // for the raw transaction's COMMIT (pinned_tx.go)
		}
		p.markAutocommit(db, w)
	default:
		p.markAutocommit(db, w)
	}
}

// markAutocommit attaches a write to its statement, which publishes it
// when it ends.
func (p *Plugin) markAutocommit(db *gorm.DB, add writeSet) {
	var w writeSet
	key := autocommitKey{db.Statement}
	if prev, ok := db.Statement.Settings.Load(key); ok {
		w = prev.(writeSet)
	}
	w.merge(add)
	db.Statement.Settings.Store(key, w)
}

// publishAutocommit publishes a write that ran outside a transaction, now
// that the statement (and so its implicit commit) has finished. It
// publishes even when the statement failed: a failure after the commit
// (a lost connection, a timeout) may hide a write.
func (p *Plugin) publishAutocommit(db *gorm.DB) {
	if p.endOwnTx(db) {
		return // its transaction's Commit published it (own_tx.go)
	}
	if conn, pinned := db.Statement.ConnPool.(*sql.Conn); pinned {
		p.afterPinned(db, conn)
	}
	if p.pending.holding.Load() > 0 {
		if fw, ok := db.Statement.Settings.LoadAndDelete(foreignKey{db.Statement}); ok {
			p.identifyForeignWrite(db, fw.(*foreignWrite))
		}
	}
	var w writeSet
	if v, ok := db.Statement.Settings.LoadAndDelete(autocommitKey{db.Statement}); ok {
		w = v.(writeSet)
	}
	if w.empty() {
		p.endTagged(db, false) // the tags released, the pinned connection returned
		return
	}
	// Through a tagged connection, the position is read there, in the
	// statement that releases the tag (writer_tag.go).
	if p.tags.maria {
		// The connection keeps its tag (writer_tag_mariadb.go).
		_, w.tagged, _ = p.endTagged(db, false)
		p.publish(db.Statement.Context, w)
		return
	}
	committed := time.Now()
	if db.Error != nil && commitOutcomeUnknown(db.Error) {
		// The client gave up on the statement, or lost its connection,
		// and the server may still commit it: held until its server
		// process no longer runs it (abandoned_commit.go).
		if backend := p.abandonedBackend(db); backend != 0 {
			_, w.tagged, _ = p.endTagged(db, false)
			p.abandonedCommit(db.Statement.Context, w, backend, committed)
			return
		}
	}
	pos, tagged, err := p.endTagged(db, true)
	if !tagged {
		p.publish(db.Statement.Context, w)
		return
	}
	w.tagged = true
	ctx, cancel := p.publishContext(db.Statement.Context)
	defer cancel()
	p.publishAt(ctx, w, pos, err, committed)
}
