package plugin

import (
	"fmt"

	"gorm.io/gorm"
)

// Callback names.
const (
	cbRoute   = "freshread:route"
	cbMark    = "freshread:mark_write"
	cbPublish = "freshread:publish_autocommit"
	cbRetry   = "freshread:retry_on_primary"
	cbSchema  = "freshread:relearn_after_ddl"
)

// autocommitKey keys, in Statement.Settings, the tables an autocommit write
// touched, from the statement's start to its end. A one-pointer struct: no
// allocation on the read path's Load.
type autocommitKey struct{ stmt *gorm.Statement }

// registerCallbacks installs the plugin's callbacks:
//
//   - Query and Row (reads, and writes that arrive as Raw(...).Scan): route
//     first, before every other callback; publish an autocommit write at
//     the end.
//   - Create, Update, Delete: mark the written table right after GORM begins
//     its default transaction (so the mark lands on the trackedTx that
//     publishes after COMMIT), and publish at the end when there was no
//     transaction (SkipDefaultTransaction).
//   - Raw (Exec): always the primary; mark before, publish after, and
//     after a schema change relearn the dependencies (MariaDB, MySQL).
func (p *Plugin) registerCallbacks(db *gorm.DB) error {
	cb := db.Callback()
	regs := []error{
		cb.Query().Before("*").Register(cbRoute, p.routeRead),
		cb.Row().Before("*").Register(cbRoute, p.routeRead),
		cb.Query().After("gorm:after_query").Register(cbPublish, p.publishAutocommit),
		cb.Query().After("gorm:query").Before("gorm:preload").Register(cbRetry, p.retryOnPrimary),
		cb.Row().After("gorm:row").Register(cbPublish, p.publishAutocommit),

		cb.Create().After("gorm:begin_transaction").Before("gorm:before_create").Register(cbMark, p.markModelWrite),
		cb.Update().After("gorm:begin_transaction").Before("gorm:before_update").Register(cbMark, p.markModelWrite),
		cb.Delete().After("gorm:begin_transaction").Before("gorm:before_delete").Register(cbMark, p.markModelWrite),
		cb.Create().After("gorm:commit_or_rollback_transaction").Register(cbPublish, p.publishAutocommit),
		cb.Update().After("gorm:commit_or_rollback_transaction").Register(cbPublish, p.publishAutocommit),
		cb.Delete().After("gorm:commit_or_rollback_transaction").Register(cbPublish, p.publishAutocommit),

		cb.Raw().Before("gorm:raw").Register(cbMark, p.markRawWrite),
		cb.Raw().After("gorm:raw").Register(cbPublish, p.publishAutocommit),
		cb.Raw().After(cbPublish).Register(cbSchema, p.relearnAfterDDL),
	}
	for _, err := range regs {
		if err != nil {
			return fmt.Errorf("plugin: register callbacks: %w", err)
		}
	}
	return nil
}

// retryOnPrimary runs a Query statement again on the primary when it failed
// on a replica with a connection error or a recovery conflict, also when
// the failure came while the rows streamed (a conflict cancels a running
// query), which the replica pool cannot see. Reads only: writes never run
// on a replica pool.
func (p *Plugin) retryOnPrimary(db *gorm.DB) {
	rp, ok := db.Statement.ConnPool.(*replicaPool)
	if !ok || db.Error == nil || !p.engine.retryable(db.Statement.Context, db.Error) {
		return
	}
	p.replicaFailed(db.Statement.Context, rp.r, db.Error)
	db.Error = nil
	db.RowsAffected = 0
	db.Statement.ConnPool = db.ConnPool
	if query := db.Callback().Query().Get("gorm:query"); query != nil {
		query(db) // the SQL is built already: the same statement runs again
	}
}

// markModelWrite records the table a Create/Update/Delete writes.
func (p *Plugin) markModelWrite(db *gorm.DB) {
	if db.Error != nil {
		return
	}
	var tables []string // nil: unknown, the database-wide position
	if name, ok := statementTable(db.Statement); ok {
		tables = []string{name}
	}
	p.recordWrite(db, tables)
}

// markRawWrite records the tables an Exec writes. Exec always runs on the
// primary (it is db.ConnPool); a statement that only reads marks nothing.
func (p *Plugin) markRawWrite(db *gorm.DB) {
	if db.Error != nil {
		return
	}
	c := p.classify(db.Statement.SQL.String())
	if c.kind == kindRead {
		return
	}
	if c.kind == kindWrite && (c.writes == nil || len(c.writes) > 0) {
		p.recordWrite(db, c.writes)
	}
}

// recordWrite attaches a write to the transaction that will publish it
// after COMMIT, or to the statement, which publishes it when it ends.
func (p *Plugin) recordWrite(db *gorm.DB, tables []string) {
	pool := db.Statement.ConnPool
	if ptx, ok := pool.(*gorm.PreparedStmtTX); ok {
		if tt, ok := ptx.Tx.(*trackedTx); ok {
			pool = tt // a transaction of GORM's prepared-statement pool
		}
	}
	switch c := pool.(type) {
	case *trackedTx:
		c.mark(tables)
	case *replaySession:
		// The session classifies and publishes each statement it runs.
	case gorm.TxCommitter:
		// A transaction the plugin did not begin (db.Connection + Begin on a
		// *sql.Conn): held until the poller sees it end (foreign_tx.go).
		p.holdForeignWrite(db, tables)
	default:
		var w writeSet
		key := autocommitKey{db.Statement}
		if prev, ok := db.Statement.Settings.Load(key); ok {
			w = prev.(writeSet)
		}
		w.add(tables)
		db.Statement.Settings.Store(key, w)
	}
}

// publishAutocommit publishes a write that ran outside a transaction, now
// that the statement (and so its implicit commit) has finished. It
// publishes even when the statement failed: a failure after the commit
// (a lost connection, a timeout) may hide a write.
func (p *Plugin) publishAutocommit(db *gorm.DB) {
	if p.pending.holding.Load() > 0 {
		if fw, ok := db.Statement.Settings.LoadAndDelete(foreignKey{db.Statement}); ok {
			p.identifyForeignWrite(db, fw.(*foreignWrite))
		}
	}
	v, ok := db.Statement.Settings.LoadAndDelete(autocommitKey{db.Statement})
	if !ok {
		return
	}
	w := v.(writeSet)
	if w.empty() {
		return
	}
	p.publish(db.Statement.Context, w)
}
