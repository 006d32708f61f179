package plugin

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/lsnstore"
)

// pgEngine: WAL LSNs. The write position is pg_current_wal_insert_lsn()
// read after COMMIT (with synchronous_commit=off the write and flush
// positions can still be behind the commit record).
type pgEngine struct{}

func (pgEngine) dialectorName() string     { return "postgres" }
func (pgEngine) dialect() classify.Dialect { return classify.Postgres }

func (pgEngine) identify(ctx context.Context, primary *sql.DB) (uint64, error) {
	var id uint64
	var s string
	if err := primary.QueryRowContext(ctx, "SELECT system_identifier::text FROM pg_control_system()").Scan(&s); err != nil {
		return 0, fmt.Errorf("plugin: read the primary's system identifier: %w", err)
	}
	if _, err := fmt.Sscanf(s, "%d", &id); err != nil {
		return 0, fmt.Errorf("plugin: system identifier %q: %w", s, err)
	}
	return id, nil
}

func (pgEngine) primaryPositions(ctx context.Context, primary *sql.DB) (lsnstore.Position, lsnstore.Position, error) {
	var ins, flush string
	if err := primary.QueryRowContext(ctx,
		"SELECT pg_current_wal_insert_lsn()::text, pg_current_wal_flush_lsn()::text").Scan(&ins, &flush); err != nil {
		return lsnstore.Position{}, lsnstore.Position{}, err
	}
	i, err := lsnstore.ParseLSN(ins)
	if err != nil {
		return lsnstore.Position{}, lsnstore.Position{}, err
	}
	f, err := lsnstore.ParseLSN(flush)
	return lsnstore.PositionOf(i), lsnstore.PositionOf(f), err
}

func (pgEngine) writePosition(ctx context.Context, primary *sql.DB) (lsnstore.Position, error) {
	return scanLSN(ctx, primary, "SELECT pg_current_wal_insert_lsn()::text")
}

// replayPosition reads the replay position and, in the same query, the
// server's identity (endpoint.go), which must be the one verified.
func (pgEngine) replayPosition(ctx context.Context, replica *sql.DB) (lsnstore.Position, error) {
	var s, id string
	if err := replica.QueryRowContext(ctx, "SELECT coalesce(pg_last_wal_replay_lsn()::text, ''), "+pgIdentity).Scan(&s, &id); err != nil {
		return lsnstore.Position{}, err
	}
	if err := checkEndpoint(ctx, replica, id); err != nil {
		return lsnstore.Position{}, err
	}
	l, err := lsnstore.ParseLSN(s)
	return lsnstore.PositionOf(l), err
}

func (pgEngine) isReplica(ctx context.Context, db *sql.DB) (bool, error) {
	var r bool
	err := db.QueryRowContext(ctx, "SELECT pg_is_in_recovery()").Scan(&r)
	return r, err
}

func (pgEngine) retryable(ctx context.Context, err error) bool { return pgRetryable(ctx, err) }

func (pgEngine) readOnlyRefusal(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25006" // read_only_sql_transaction
}

func (pgEngine) readOnlyFunctions(ctx context.Context, primary *sql.DB) ([]string, error) {
	return pgReadOnlyFunctions(ctx, primary)
}

// retryable reports whether a read that failed on a replica with err may be
// run again on the primary: connection failures and recovery conflicts, not
// the caller's own cancellation and not ordinary SQL errors.
func pgRetryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"): // connection exception
			return true
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03": // shutdown, crash, cannot connect now
			return true
		case pgErr.Code == "40001" || pgErr.Code == "40P01":
			// Recovery conflicts on a standby use these codes with
			// "conflict with recovery" in the detail or message.
			return strings.Contains(pgErr.Message, "recovery") || strings.Contains(pgErr.Detail, "recovery")
		}
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}
