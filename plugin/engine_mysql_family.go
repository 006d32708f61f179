package plugin

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/internal/engines"
)

// mysqlFamily is what the MariaDB and MySQL engines share, embedded in
// both: the driver and grammar, which errors are retried or mean
// read-only, how a replica reports itself and its threads, and how a
// foreign transaction is followed. Only positions differ.
type mysqlFamily struct {
	replication replicationColumns // SHOW SLAVE STATUS or SHOW REPLICA STATUS
	monitor     string             // the privilege the status statement needs
}

func (f mysqlFamily) monitorPrivilege() string { return f.monitor }

func (mysqlFamily) probeTxWatch(ctx context.Context, primary *sql.DB) error {
	return mysqlProbeTxWatch(ctx, primary)
}

func (mysqlFamily) dialectorName() string     { return "mysql" }
func (mysqlFamily) dialect() classify.Dialect { return classify.MySQL }

// isReplica: the status statement returns a row.
func (f mysqlFamily) isReplica(ctx context.Context, db *sql.DB) (bool, error) {
	rows, err := db.QueryContext(ctx, f.replication.statement)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	return rows.Next(), rows.Err()
}

func (f mysqlFamily) replicationStatus(ctx context.Context, replica *sql.DB) (replicationStatus, error) {
	return f.replication.read(ctx, replica)
}

func (mysqlFamily) retryable(ctx context.Context, err error) bool { return mysqlRetryable(ctx, err) }
func (mysqlFamily) readOnlyRefusal(err error) bool                { return mysqlReadOnlyRefusal(err) }

// readOnlyFunctions: MariaDB and MySQL do not enforce READS SQL DATA, so no
// user function is known to be read-only without Config.ReadOnlyFunctions.
func (mysqlFamily) readOnlyFunctions(context.Context, *sql.DB) ([]string, error) { return nil, nil }

func (mysqlFamily) txID(ctx context.Context, q gorm.ConnPool) (string, error) {
	return mysqlTxID(ctx, q)
}

func (mysqlFamily) txEnded(ctx context.Context, primary *sql.DB, id string) (bool, error) {
	return mysqlTxEnded(ctx, primary, id)
}

func (mysqlFamily) txCheckInterval() time.Duration { return mysqlTxCheckInterval }

// mysqlRetryable: connection failures of go-sql-driver/mysql and server
// shutdowns, for MariaDB and MySQL.
func mysqlRetryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || (engines.MySQL != nil && engines.MySQL.InvalidConn(err)) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	if n, ok := engines.MySQLErrorNumber(err); ok {
		switch n {
		case 1053, 1927, 1152: // server shutdown, connection killed, aborted connection
			return true
		}
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}

func mysqlReadOnlyRefusal(err error) bool {
	n, ok := engines.MySQLErrorNumber(err)
	return ok && (n == 1290 || n == 1836) // --read-only, read-only mode
}
