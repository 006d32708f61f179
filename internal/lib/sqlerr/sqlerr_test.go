package sqlerr

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	// MySQL errors are known through what mysqlfamily registers.
	_ "github.com/freshread/freshread/mysqlfamily"
)

func TestRefused(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Severity: "ERROR", Code: "23505"}, true},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Severity: "ERROR"}), true},
		{&pgconn.PgError{Severity: "FATAL", Code: "57P01"}, false},
		{&pgconn.PgError{Severity: "PANIC"}, false},
		{&mysql.MySQLError{Number: 1062}, true},
		{sql.ErrTxDone, true},
		{io.ErrUnexpectedEOF, false},
		{errors.New("connection reset"), false},
	} {
		if got := Refused(c.err); got != c.want {
			t.Errorf("Refused(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestEndedByOther(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{&pgconn.PgError{Severity: "FATAL", Code: "57P01"}, true},
		{fmt.Errorf("write: %w", &pgconn.PgError{Severity: "FATAL", Code: "57P01"}), true},
		{&pgconn.PgError{Severity: "ERROR", Code: "23505"}, false},
		{&mysql.MySQLError{Number: 1927}, true},
		{&mysql.MySQLError{Number: 1062}, false},
		{mysql.ErrInvalidConn, true},
		{fmt.Errorf("commit: %w", driver.ErrBadConn), true},
		{errors.New("connection reset"), false},
	} {
		if got := EndedByOther(c.err); got != c.want {
			t.Errorf("EndedByOther(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
