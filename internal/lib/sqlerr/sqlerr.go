package sqlerr

import (
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/engines"
)

// Refused reports whether err means the statement (a COMMIT, an INSERT)
// did not take effect: the server refused it (a constraint, a syntax
// error) or the transaction was already over. Anything else (a connection
// lost under it, a timeout) leaves the outcome unknown. A PostgreSQL error
// that ends the session (FATAL, PANIC: the server shut down, the backend
// was terminated) may come after the commit record, so it is unknown too.
func Refused(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Severity != "FATAL" && pgErr.Severity != "PANIC"
	}
	if _, my := engines.MySQLErrorNumber(err); my || errors.Is(err, sql.ErrTxDone) || errors.Is(err, pgx.ErrTxCommitRollback) {
		return true
	}
	return errors.Is(err, gorm.ErrDuplicatedKey) || errors.Is(err, gorm.ErrForeignKeyViolated)
}

// PostgresCode is the SQLSTATE of a PostgreSQL error in err's chain, ""
// when there is none.
func PostgresCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// EndedByOther reports whether err says that another session ended the
// connection: PostgreSQL's 57P01 (pg_terminate_backend, or a fast
// shutdown), MariaDB's and MySQL's ER_CONNECTION_KILLED (1927, KILL
// CONNECTION), or the MySQL driver's broken connection, which is what a
// KILL of an idle connection leaves.
func EndedByOther(err error) bool {
	if err == nil {
		return false
	}
	if PostgresCode(err) == "57P01" {
		return true
	}
	if n, ok := engines.MySQLErrorNumber(err); ok {
		return n == 1927
	}
	return errors.Is(err, driver.ErrBadConn) || (engines.MySQL != nil && engines.MySQL.InvalidConn(err))
}
