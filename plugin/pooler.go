package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// Connection poolers (PgBouncer) between the plugin and PostgreSQL. What
// the plugin needs of a server session lasts one transaction or one
// simple-query message: the folded COMMIT is one message (commit_fold.go),
// txid_current() runs inside the transaction it identifies, the position
// reads are single statements. A pooler in session mode hands each client
// connection one server connection for its life, and everything works as
// without it. In transaction mode a client connection gets a server
// connection for one transaction only, and what pgx keeps on the server
// between transactions is lost: the named prepared statements of its
// default query exec mode (cache_statement) and of GORM's PrepareStmt,
// which pgx's database/sql driver prepares by name, exist on one server
// connection and are then run, or prepared again under the same name, on
// another ("prepared statement ... does not exist", "... already
// exists"); describe_exec sends its two round trips to two server
// connections. PgBouncer keeps named statements itself from 1.21 on
// (max_prepared_statements); Debian bookworm's 1.18 does not.
//
// At db.Use the plugin checks the primary and every replica: the process
// ID of a pgx connection (the cancel key the server sent) is the server
// process's, pg_backend_pid(), unless something in between made its own
// (PgBouncer does). Only then does it look closer, on two connections of
// its own: transaction pooling shows as the two sharing one server
// process, or one of them changing its server process while the other
// holds a transaction; a statement prepared by name on one server process
// and run on another shows whether the pooler keeps named statements. When
// it does not, a pgx exec mode that needs them, or GORM's PrepareStmt, is
// refused with ErrPooler. Neither sign shows in every round: other
// clients of the pooler may take the server process the probe released
// in between. So the probe looks up to probeRounds times, and a pooler
// that shows no sign of transaction pooling in any round counts as in
// session mode; whether named statements are kept is judged only on a
// server process known to be another than the one they were prepared on.
// A pooler in transaction mode taken for one in session mode would have
// session locks outlive their transactions and leave server processes
// unknown, while the other mistake only tags fewer writes.

// ErrPooler is returned by db.Use when a connection pooler in transaction
// mode sits in front of the primary or a replica and the connections are
// opened in a way it breaks; the message names the remedy.
var ErrPooler = errors.New("plugin: refused behind a connection pooler in transaction mode")

// checkPooler checks the server behind db (what names it in errors).
// prepareStmt: the *gorm.DB prepares statements (gorm.Config.PrepareStmt).
// Connections it cannot make or probe are left to the checks that follow.
// It reports what it found (poolerCheck).
func (p *Plugin) checkPooler(ctx context.Context, what string, db *sql.DB, prepareStmt bool) (poolerCheck, error) {
	cfg, behind, err := pgPoolerConfig(ctx, db)
	if err != nil {
		// Not known: taken as a pooler of a mode not known, whose PIDs
		// are not the server's (the cautious reading of each).
		p.cfg.Logger.Warn("freshread: cannot tell whether a connection pooler is in front of the server; taken as one whose pool mode is not known", "server", what, "err", redact(err, p.primarySecrets))
		return poolerCheck{behind: true, txPooled: true, unknown: true}, nil
	}
	if !behind {
		return poolerCheck{}, nil
	}
	return p.checkPooled(ctx, what, cfg, prepareStmt)
}

// poolerCheck is what stands in front of a server.
type poolerCheck struct {
	// behind: something in front of the server made its own process IDs
	// (a connection's PID is not its server process's).
	behind bool
	// txPooled: a client connection may change server connections
	// between transactions (a pooler in transaction mode, or one whose
	// mode could not be probed: unknown).
	txPooled, unknown bool
}

// checkPooled checks a server a pooler stands in front of (cfg: a
// connection's configuration).
func (p *Plugin) checkPooled(ctx context.Context, what string, cfg *pgx.ConnConfig, prepareStmt bool) (poolerCheck, error) {
	txPooled := poolerCheck{behind: true, txPooled: true}
	txPooling, namedKept, err := probeTxPooling(ctx, cfg)
	if err != nil {
		if errors.Is(err, errStatementPooling) {
			return txPooled, fmt.Errorf("%w: %s: %v: use pool_mode = transaction or session", ErrPooler, what, err)
		}
		p.cfg.Logger.Warn("freshread: a connection pooler is in front of the server, and its pool mode could not be probed", "server", what, "err", err)
		txPooled.unknown = true
		return txPooled, nil
	}
	if !txPooling || namedKept {
		return poolerCheck{behind: true, txPooled: txPooling}, nil
	}
	switch mode := cfg.DefaultQueryExecMode; mode {
	case pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec:
		return txPooled, fmt.Errorf("%w: %s is reached through a pooler in transaction mode that does not keep named prepared statements, and pgx's query exec mode %q needs them (or one server connection for two round trips): open it with default_query_exec_mode=simple_protocol (or exec, or cache_describe) in the DSN, or postgres.Config{PreferSimpleProtocol: true}; or use pool_mode = session, or PgBouncer 1.21 or later with max_prepared_statements", ErrPooler, what, mode)
	}
	if prepareStmt {
		return txPooled, fmt.Errorf("%w: %s is reached through a pooler in transaction mode that does not keep named prepared statements, and gorm.Config.PrepareStmt prepares them by name: turn PrepareStmt off, or use pool_mode = session, or PgBouncer 1.21 or later with max_prepared_statements", ErrPooler, what)
	}
	return txPooled, nil
}

// pgPoolerConfig reports whether a pgx connection of db has a process ID
// other than its server process's, and the connection's configuration
// (nil, false: not pgx's). It fails when it cannot connect or ask.
func pgPoolerConfig(ctx context.Context, db *sql.DB) (*pgx.ConnConfig, bool, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, false, err
	}
	defer conn.Close()
	var (
		cfg    *pgx.ConnConfig
		behind bool
	)
	err = conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return nil
		}
		pgc := sc.Conn().PgConn()
		pid, err := backendPID(ctx, pgc)
		if err != nil {
			return err
		}
		cfg, behind = sc.Conn().Config(), pid != pgc.PID()
		return nil
	})
	return cfg, behind, err
}

// backendPID is pg_backend_pid() on c, by the simple protocol.
func backendPID(ctx context.Context, c *pgconn.PgConn) (uint32, error) {
	rs, err := c.Exec(ctx, "SELECT pg_backend_pid()").ReadAll()
	if err != nil {
		return 0, err
	}
	if len(rs) != 1 || len(rs[0].Rows) != 1 || len(rs[0].Rows[0]) != 1 {
		return 0, errors.New("pg_backend_pid(): no row")
	}
	n, err := strconv.ParseUint(string(rs[0].Rows[0][0]), 10, 32)
	return uint32(n), err
}

// poolerProbeWait bounds a statement of the probe that waits, in a pool
// of one server connection, for the one the other connection holds.
const poolerProbeWait = 3 * time.Second

// errStatementPooling: the pooler refuses transactions.
var errStatementPooling = errors.New("the pooler refuses transactions (pool_mode = statement?)")

// probeRounds bounds the rounds of probeTxPooling.
const probeRounds = 5

// probeTxPooling opens two connections with cfg and reports whether they
// are pooled by transaction, and if so whether a statement prepared by
// name on one server process can be run on another.
func probeTxPooling(ctx context.Context, cfg *pgx.ConnConfig) (txPooling, namedKept bool, err error) {
	cfg = cfg.Copy()
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	c1, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, false, err
	}
	defer c1.Close(context.WithoutCancel(ctx))
	c2, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, false, err
	}
	defer c2.Close(context.WithoutCancel(ctx))
	a, b := c1.PgConn(), c2.PgConn()
	name := fmt.Sprintf("freshread_pooler_probe_%d", rand.Uint64())
	// Prepared inside a transaction, so that the server process it is
	// prepared on is known: a pooler in transaction mode keeps the
	// client on one server process until COMMIT.
	if _, err := a.Exec(ctx, "BEGIN").ReadAll(); err != nil {
		return false, false, fmt.Errorf("%w: %v", errStatementPooling, err)
	}
	if _, err := a.Prepare(ctx, name, "SELECT 1", nil); err != nil {
		return false, false, err
	}
	prepared, err := backendPID(ctx, a)
	if err != nil {
		return false, false, err
	}
	if _, err := a.Exec(ctx, "COMMIT").ReadAll(); err != nil {
		return false, false, err
	}
	for range probeRounds {
		pooled, kept, waited, err := probeRound(ctx, a, b, name, prepared)
		if err != nil || waited || pooled {
			// waited: a pool of one server connection, transaction
			// pooling, and whether named statements are kept cannot
			// be told.
			return pooled, kept, err
		}
	}
	return false, true, nil
}

// probeRound looks once for a sign of transaction pooling. b begins a
// transaction, which holds a server process (in transaction mode often
// the one a just released: PgBouncer reuses the last one released), then
// a begins one. In session mode a is always on the server process it
// prepared name on (prepared), and b never gets that one. In transaction
// mode a may get another: there a runs name, which shows whether the
// pooler keeps named statements across server processes. waited: a's
// BEGIN waited for the one server process b holds (a pool of one). b's
// transaction ends before a's, so that the server process a held is the
// last one released, the one b's next BEGIN gets: a round without a sign
// (another client took the server process released last) leaves the next
// one its chance.
func probeRound(ctx context.Context, a, b *pgconn.PgConn, name string, prepared uint32) (pooled, namedKept, waited bool, err error) {
	if _, err := b.Exec(ctx, "BEGIN").ReadAll(); err != nil {
		return false, false, false, fmt.Errorf("%w: %v", errStatementPooling, err)
	}
	qctx, cancel := context.WithTimeout(ctx, poolerProbeWait)
	_, err = a.Exec(qctx, "BEGIN").ReadAll()
	cancel()
	if err != nil {
		_, _ = b.Exec(ctx, "ROLLBACK").ReadAll()
		if qctx.Err() != nil && ctx.Err() == nil {
			return true, false, true, nil
		}
		return false, false, false, err
	}
	defer func() {
		_, _ = b.Exec(ctx, "ROLLBACK").ReadAll()
		_, _ = a.Exec(ctx, "ROLLBACK").ReadAll()
	}()
	pid, err := backendPID(ctx, a)
	if err != nil {
		return false, false, false, err
	}
	if pid == prepared {
		return false, false, false, nil
	}
	_, namedErr := a.ExecPrepared(ctx, name, nil, nil, nil).Close()
	return true, namedErr == nil, false, nil
}
