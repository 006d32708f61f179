package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/lsnstore"
)

// pgEngine: WAL LSNs. The write position is pg_current_wal_insert_lsn()
// read after COMMIT (with synchronous_commit=off the write and flush
// positions can still be behind the commit record).
type pgEngine struct{}

func (pgEngine) name() string              { return "postgres" }
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

func (pgEngine) primaryPositions(ctx context.Context, primary *sql.DB) (lsnstore.LSN, lsnstore.LSN, error) {
	var ins, flush string
	if err := primary.QueryRowContext(ctx,
		"SELECT pg_current_wal_insert_lsn()::text, pg_current_wal_flush_lsn()::text").Scan(&ins, &flush); err != nil {
		return 0, 0, err
	}
	i, err := lsnstore.ParseLSN(ins)
	if err != nil {
		return 0, 0, err
	}
	f, err := lsnstore.ParseLSN(flush)
	return i, f, err
}

func (pgEngine) writePosition(ctx context.Context, primary *sql.DB) (lsnstore.LSN, error) {
	return scanPosition(ctx, primary, "SELECT pg_current_wal_insert_lsn()::text")
}

func (pgEngine) replayPosition(ctx context.Context, replica *sql.DB) (lsnstore.LSN, error) {
	return scanPosition(ctx, replica, "SELECT coalesce(pg_last_wal_replay_lsn()::text, '')")
}

func (pgEngine) isReplica(ctx context.Context, db *sql.DB) (bool, error) {
	var r bool
	err := db.QueryRowContext(ctx, "SELECT pg_is_in_recovery()").Scan(&r)
	return r, err
}

func (pgEngine) retryable(ctx context.Context, err error) bool { return retryable(ctx, err) }

func (pgEngine) readOnlyRefusal(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25006" // read_only_sql_transaction
}

func (pgEngine) readOnlyFunctions(ctx context.Context, primary *sql.DB) ([]string, error) {
	return pgReadOnlyFunctions(ctx, primary)
}
