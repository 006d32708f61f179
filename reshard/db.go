package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// sessionSQL makes the text form of every value the same on both sides
// (values cross as text: output on the source, input on the target) and
// marks the transaction as the mover's, which the guard lets through.
const sessionSQL = `SELECT set_config('DateStyle', 'ISO, MDY', true), set_config('IntervalStyle', 'postgres', true),
 set_config('TimeZone', 'UTC', true), set_config('extra_float_digits', '1', true), set_config('bytea_output', 'hex', true),
 set_config('freshread.mover', 'on', true), set_config('synchronous_commit', 'on', true)`

// withTx runs fn in a transaction of db with the mover's settings.
func withTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, sessionSQL); err != nil {
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

// LSN is a PostgreSQL WAL position.
type LSN uint64

// parseLSN parses "X/Y".
func parseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("reshard: bad LSN %q", s)
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("reshard: bad LSN %q", s)
	}
	return LSN(h<<32 | l), nil
}

func (l LSN) String() string { return fmt.Sprintf("%X/%X", uint64(l)>>32, uint64(l)&0xffffffff) }

// scanLSN reads a pg_lsn selected as text (NULL: 0).
func scanLSN(ns sql.NullString) (LSN, error) {
	if !ns.Valid {
		return 0, nil
	}
	return parseLSN(ns.String)
}

// sqlState returns err's SQLSTATE, or "".
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
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
