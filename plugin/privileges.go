package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/freshread/freshread/internal/engines"
)

// privilegeDenied reports whether err is the server refusing a statement
// for lack of a privilege: MariaDB/MySQL 1227 (a global privilege such as
// PROCESS or SLAVE MONITOR), 1142, 1143 and 1044 (table, column, database);
// PostgreSQL 42501 (insufficient_privilege).
func privilegeDenied(err error) bool {
	if n, ok := engines.MySQLErrorNumber(err); ok {
		switch n {
		case 1227, 1142, 1143, 1044:
			return true
		}
		return false
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// mysqlGrantee is the account a MariaDB or MySQL pool logs in as, quoted
// for a GRANT ('app'@'%'); "<user>" when the server does not say. It names
// no secret: passwords never leave the DSN.
func mysqlGrantee(ctx context.Context, db *sql.DB) string {
	var account string
	if err := db.QueryRowContext(ctx, "SELECT CURRENT_USER()").Scan(&account); err != nil || account == "" {
		return "<user>"
	}
	if i := strings.LastIndexByte(account, '@'); i >= 0 {
		return fmt.Sprintf("'%s'@'%s'", account[:i], account[i+1:])
	}
	return "'" + account + "'"
}

// Engines whose features need privileges beyond the database's own
// (MariaDB and MySQL) say which, so that a missing one is said once,
// loudly, with the GRANT that gives it.
type (
	// monitorPrivileger names the privilege that SHOW SLAVE STATUS (SHOW
	// REPLICA STATUS) needs: SLAVE MONITOR on MariaDB, REPLICATION CLIENT
	// on MySQL.
	monitorPrivileger interface{ monitorPrivilege() string }
	// txWatchProber runs what following a foreign transaction needs
	// (txWatcher) on the primary, at Initialize; an error wrapping the
	// server's refusal when the privilege is missing.
	txWatchProber interface {
		probeTxWatch(ctx context.Context, primary *sql.DB) error
	}
)

// mysqlProbeTxWatch reads INNODB_TRX, which needs PROCESS.
func mysqlProbeTxWatch(ctx context.Context, primary *sql.DB) error {
	rows, err := primary.QueryContext(ctx, "SELECT trx_id FROM information_schema.INNODB_TRX LIMIT 1")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}

// checkForeignTxPrivilege probes, at Initialize, whether the engine can
// follow a transaction the plugin did not begin. When the primary refuses
// for lack of a privilege, writes inside such transactions are refused
// (ErrForeignTransaction) instead of being published before they may have
// committed, and the warning names the GRANT that lifts it.
func (p *Plugin) checkForeignTxPrivilege(ctx context.Context, primary *sql.DB) {
	pp, ok := p.engine.(txWatchProber) // called before a heartbeat engine wraps it
	if !ok {
		return
	}
	err := pp.probeTxWatch(ctx, primary)
	if err == nil || !privilegeDenied(err) {
		return
	}
	p.foreignTxDenied = fmt.Errorf("the primary refuses information_schema.INNODB_TRX (%v); GRANT PROCESS ON *.* TO %s", err, mysqlGrantee(ctx, primary))
	p.cfg.Logger.Warn("freshread: writes inside transactions not begun through the plugin (db.Connection, then Begin) cannot be followed to their commit, so they are refused (plugin.ErrForeignTransaction); db.Transaction and Begin on the *gorm.DB are not affected",
		"missing", p.foreignTxDenied.Error())
}

// warnReplicaPrivilege says, once per replica, that the replica's status
// cannot be read for lack of a privilege. Routing does not depend on it
// (the replica's replay position decides every read), but a DSN that names
// a server that is no replica cannot be refused, and the replication
// threads are not monitored (freshread_replica_replicating stays absent).
func (p *Plugin) warnReplicaPrivilege(ctx context.Context, r *replica, err error) {
	r.privilegeWarning.Do(func() {
		grant := ""
		if pp, ok := p.engine.(monitorPrivileger); ok && pp.monitorPrivilege() != "" {
			grant = fmt.Sprintf("GRANT %s ON *.* TO %s", pp.monitorPrivilege(), mysqlGrantee(ctx, r.db))
		}
		p.cfg.Logger.Warn("freshread: cannot read the replica's replication status: it is not checked to be a replica, and its replication threads are not monitored; its replay position still decides every read",
			"replica", r.name, "err", err, "grant", grant)
	})
}

// pgRole is the role a PostgreSQL pool logs in as, quoted for a GRANT.
func pgRole(ctx context.Context, db *sql.DB) string {
	var role string
	if err := db.QueryRowContext(ctx, "SELECT quote_ident(current_user)").Scan(&role); err != nil || role == "" {
		return "<role>"
	}
	return role
}

// positionGrant is the GRANT that lets db's role read positions with the
// engine's function (replay: a replica's; else the primary's); "" when the
// engine reads them with no function a role can be refused.
func positionGrant(ctx context.Context, eng engine, db *sql.DB, replay bool) string {
	if _, ok := eng.(pgEngine); !ok {
		return ""
	}
	fn := "pg_current_wal_insert_lsn()"
	if replay {
		fn = "pg_last_wal_replay_lsn()"
	}
	return fmt.Sprintf("GRANT EXECUTE ON FUNCTION %s TO %s", fn, pgRole(ctx, db))
}

// checkPositionPrivilege reads the primary's position once at Initialize:
// without it no write can be published, so a role refused the function is
// an error naming the GRANT, not a plugin that silently sends every read
// to the primary.
func (p *Plugin) checkPositionPrivilege(ctx context.Context, primary *sql.DB) error {
	if _, err := p.engine.writePosition(ctx, primary); err != nil && privilegeDenied(err) {
		return fmt.Errorf("%w: the primary refuses its write position to this role (%v); %s", ErrPrivilege, err, positionGrant(ctx, p.engine, primary, false))
	}
	return nil
}

// warnReplayPrivilege says, once per replica, that its replay position
// cannot be read for lack of a privilege: the replica serves no read until
// it can.
func (p *Plugin) warnReplayPrivilege(ctx context.Context, r *replica, err error) {
	r.replayWarning.Do(func() {
		p.cfg.Logger.Warn("freshread: the replica refuses its replay position to this role; it serves no read until it can",
			"replica", r.name, "err", err, "grant", positionGrant(ctx, p.engine, r.db, true))
	})
}
