package sqlerr

import (
	"database/sql"
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
