package plugin

import (
	"database/sql"

	"gorm.io/gorm"
)

// Behind a pooler in transaction mode (ownTxAutocommit) a write
// outside a transaction cannot take its writer tag for the session: the
// lock would stay with a server connection that other clients go on to
// use. The plugin runs such a write from the primary's pool, or from a
// connection pinned with db.Connection with no transaction open on it
// (which holds no server connection between statements there), in a
// transaction of its own on the primary's pool instead, which takes the tag for the transaction
// as any other does, and commits it when the statement ends: GORM's Create,
// Update and Delete with SkipDefaultTransaction, and raw DML and DDL
// (INSERT, UPDATE, DELETE, MERGE, with or without a WITH; CREATE, ALTER,
// DROP, TRUNCATE, COMMENT, GRANT, REVOKE), one statement or several in
// one text, which PostgreSQL runs as one transaction anyway. Statements
// that cannot run in a transaction block (VACUUM, CREATE INDEX
// CONCURRENTLY, CREATE DATABASE, ALTER SYSTEM, subscriptions, ...) and
// texts that control transactions run as before, untagged. What the
// caller sees does not change: the statement's effects commit when it
// returns, or not at all.

// ownTxAutocommit reports whether writes outside a transaction run in one
// of the plugin's own: on PostgreSQL through pgx behind a pooler in
// transaction mode (or of a mode not known), whose PIDs are its own. The
// transaction takes the writer tag when the store's leases tag writers
// (writerTags.xactOnly); with a store that takes none (the in-memory one)
// it is still the way the plugin learns the server process that runs the
// write (in the BEGIN's message), so that a write whose client gave up on
// it is held there (abandoned_commit.go) rather than published before it
// may commit.
func (p *Plugin) ownTxAutocommit() bool {
	return p.pgxPrimary && !p.primaryPIDs && p.primaryTxPooled
}

// ownTxKey keys, in Statement.Settings, the ownTx of a statement.
type ownTxKey struct{ stmt *gorm.Statement }

// ownTx is the transaction the plugin began for one statement, and the
// statement's pool before it.
type ownTx struct {
	tx   gorm.ConnPool
	orig gorm.ConnPool
}

// beginOwnTx begins the statement's own transaction when it needs one; it
// reports whether it handled the statement (began one, or failed to, with
// the error added).
func (p *Plugin) beginOwnTx(db *gorm.DB) bool {
	if !p.ownTxAutocommit() {
		return false
	}
	stmt := db.Statement
	pp := primaryPoolOf(stmt.ConnPool)
	if _, ok := stmt.ConnPool.(*sql.Conn); ok {
		// A connection pinned with db.Connection, with no raw
		// transaction open on it (fenceUnseenCommit). Behind a pooler in
		// transaction mode it keeps no server connection, nor session,
		// between statements: the write runs in a transaction of the
		// plugin's own from the primary's pool, as one from the pool
		// does. Not behind a pooler whose mode is unknown: in session
		// mode the pinned connection's session would matter.
		if !p.primaryPoolModeUnknown {
			pp = p.primary
		}
	}
	if pp == nil {
		return false
	}
	if q := stmt.SQL.String(); q != "" && !ownTxStatement(q) {
		return false // a raw statement to run as it is
	}
	tx, err := pp.BeginTx(stmt.Context, nil)
	if err != nil {
		db.AddError(err)
		return true
	}
	stmt.Settings.Store(ownTxKey{stmt}, &ownTx{tx: tx, orig: stmt.ConnPool})
	stmt.ConnPool = tx
	return true
}

// ownTxStatement reports whether a raw write runs in a transaction of the
// plugin's own: DML and DDL that can run in a transaction block, no
// transaction control.
func ownTxStatement(query string) bool {
	ws := statementWords(query)
	if len(ws) == 0 || txControlWord(ws) {
		return false
	}
	for _, w := range ws {
		if !inTxBlock(w) {
			return false
		}
	}
	return true
}

// inTxBlock reports whether a statement (its first words) is DML or DDL
// that PostgreSQL runs inside a transaction block.
func inTxBlock(w []string) bool {
	switch w[0] {
	case "INSERT", "UPDATE", "DELETE", "MERGE", "WITH":
		return true
	case "CREATE", "ALTER", "DROP", "TRUNCATE", "COMMENT", "GRANT", "REVOKE":
		for _, x := range w[1:] {
			switch x {
			case "CONCURRENTLY", "DATABASE", "TABLESPACE", "SUBSCRIPTION", "SYSTEM":
				return false
			}
		}
		return true
	}
	return false
}

// endOwnTx commits the statement's own transaction (rolls it back when the
// statement failed) and gives the statement its pool back; it reports
// whether the statement had one. Its Commit publishes what it wrote.
func (p *Plugin) endOwnTx(db *gorm.DB) bool {
	v, ok := db.Statement.Settings.LoadAndDelete(ownTxKey{db.Statement})
	if !ok {
		return false
	}
	o := v.(*ownTx)
	db.Statement.ConnPool = o.orig
	if db.Error != nil {
		_ = endPoolTx(o.tx, false)
		return true
	}
	if err := endPoolTx(o.tx, true); err != nil {
		db.AddError(err)
	}
	return true
}

// endPoolTx commits or rolls back a transaction the primary's pool began.
func endPoolTx(tx gorm.ConnPool, commit bool) error {
	c, ok := tx.(gorm.TxCommitter)
	if !ok {
		return gorm.ErrInvalidTransaction
	}
	if commit {
		return c.Commit()
	}
	return c.Rollback()
}
