package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/freshread/freshread/internal/engines"
	"github.com/jackc/pgx/v5/pgconn"
)

// sessionSQL makes the text form of every value the same on both sides
// (values cross as text: output on the source, input on the target) and
// marks the transaction as the mover's, which the guard lets through.
const sessionSQL = `SELECT set_config('DateStyle', 'ISO, MDY', true), set_config('IntervalStyle', 'postgres', true),
 set_config('TimeZone', 'UTC', true), set_config('extra_float_digits', '1', true), set_config('bytea_output', 'hex', true),
 set_config('freshread.mover', 'on', true), set_config('synchronous_commit', 'on', true)`

// replicaSQL also makes the transaction a replication session
// (session_replication_role = replica), as logical replication's apply
// is: ordinary triggers (the guard, the application's own: an updated_at
// trigger would change the copied values) and foreign key checks do not
// fire, so tables with foreign keys between them can be copied in any
// order. It needs a superuser, or on PostgreSQL 15 a GRANT SET ON
// PARAMETER session_replication_role.
const replicaSQL = sessionSQL + `, set_config('session_replication_role', 'replica', true)`

// replicaRole caches, per pool, whether its role may set
// session_replication_role.
var replicaRole sync.Map // *sql.DB -> bool

// mayReplicate reports whether db's role may set session_replication_role
// (asked once per pool).
func mayReplicate(ctx context.Context, db *sql.DB) (bool, error) {
	if v, ok := replicaRole.Load(db); ok {
		return v.(bool), nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	_, err = tx.ExecContext(ctx, `SELECT set_config('session_replication_role', 'replica', true)`)
	tx.Rollback()
	if err != nil && sqlState(err) != "42501" { // insufficient_privilege
		return false, err
	}
	replicaRole.Store(db, err == nil)
	return err == nil, nil
}

// withTx runs fn in a transaction of db with the mover's settings.
func withTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	replica, err := mayReplicate(ctx, db)
	if err != nil {
		return err
	}
	settings := sessionSQL
	if replica {
		settings = replicaSQL
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, settings); err != nil {
		tx.Rollback()
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// querier is a *sql.DB, *sql.Tx or *sql.Conn.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// quoteIdent quotes a PostgreSQL identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// quoteLiteral quotes a string literal (standard_conforming_strings on).
func quoteLiteral(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

// walPos is a PostgreSQL WAL position.
type walPos uint64

// parseLSN parses "X/Y".
func parseLSN(s string) (walPos, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("reshard: bad LSN %q", s)
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("reshard: bad LSN %q", s)
	}
	return walPos(h<<32 | l), nil
}

func (l walPos) String() string { return fmt.Sprintf("%X/%X", uint64(l)>>32, uint64(l)&0xffffffff) }

// scanLSN reads a pg_lsn selected as text (NULL: 0).
func scanLSN(ns sql.NullString) (walPos, error) {
	if !ns.Valid {
		return 0, nil
	}
	return parseLSN(ns.String)
}

// sqlState returns err's SQLSTATE (PostgreSQL's, or MariaDB's and
// MySQL's), or "".
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	if state, ok := engines.MySQLSQLState(err); ok && state != "\x00\x00\x00\x00\x00" {
		return state
	}
	return ""
}

func int32s(bs []int) []int32 {
	out := make([]int32, len(bs))
	for i, b := range bs {
		out[i] = int32(b)
	}
	return out
}
