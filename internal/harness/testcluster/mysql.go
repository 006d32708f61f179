package testcluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// Environment variables that name a running MySQL 8 primary and its GTID
// replica (see StartMySQL). They live here, not in env.go, with the rest of
// the MySQL provider.
const (
	// EnvMySQLPrimary is a go-sql-driver/mysql DSN of a privileged user on
	// the MySQL 8 primary (gtid_mode=ON), e.g. root:@tcp(127.0.0.1:3306)/.
	// The DSN's port must be the server's own @@port (no port mapping):
	// the tests tell the servers apart by it.
	EnvMySQLPrimary = "FRESHREAD_MYSQL_PRIMARY_DSN"
	// EnvMySQLImage set (to an image such as mysql:8.4, or 1 for that one)
	// lets MySQL run in containers of that image when a Docker engine
	// answers and can pull it; unset, MySQL needs the DSN variables.
	EnvMySQLImage = "FRESHREAD_MYSQL_IMAGE"
	// EnvMySQLReplica is the DSN of that primary's GTID replica
	// (SOURCE_AUTO_POSITION=1); the user may STOP/START REPLICA.
	EnvMySQLReplica = "FRESHREAD_MYSQL_REPLICA_DSN"
)

// errNoMySQLProvider is wrapped (with ErrUnavailable) when neither MySQL
// provider can be used: no FRESHREAD_MYSQL_* variables and no Docker engine.
// There is no local-binary provider: Debian's "mysql" packages are MariaDB.
var errNoMySQLProvider = errors.New("no provider")

// MySQL is a MySQL 8 primary with one GTID replica (gtid_mode=ON,
// SOURCE_AUTO_POSITION=1).
type MySQL struct {
	backend mysqlBackend
}

// mysqlBackend is what a provider implements for MySQL.
type mysqlBackend interface {
	// primaryDSN and replicaDSN return go-sql-driver/mysql DSNs of a
	// privileged user for database db ("" for none).
	primaryDSN(db string) string
	replicaDSN(db string) string
	close() error
}

// StartMySQL starts (or connects to) a MySQL primary and its replica:
// FRESHREAD_MYSQL_PRIMARY_DSN and FRESHREAD_MYSQL_REPLICA_DSN, else
// containers of FRESHREAD_MYSQL_IMAGE when it is set and a Docker engine is
// reachable. With neither it returns an
// error wrapping ErrUnavailable and errNoMySQLProvider.
func StartMySQL(ctx context.Context) (*MySQL, error) {
	var (
		b   mysqlBackend
		err error
	)
	switch {
	case os.Getenv(EnvMySQLPrimary) != "":
		b, err = newEnvMySQLPair(EnvMySQLPrimary, EnvMySQLReplica)
	case mysqlContainers(ctx):
		b, err = startDockerMySQL(ctx)
	default:
		return nil, fmt.Errorf("%w: MySQL: %w: set %s and %s, or %s=mysql:8.4 with a Docker engine that can pull it (no local-binary provider and no MySQL in the test image: Debian's mysql packages are MariaDB)",
			ErrUnavailable, errNoMySQLProvider, EnvMySQLPrimary, EnvMySQLReplica, EnvMySQLImage)
	}
	if err != nil {
		return nil, err
	}
	m := &MySQL{backend: b}
	if err := m.WaitCaughtUp(ctx); err != nil {
		b.close()
		return nil, err
	}
	return m, nil
}

// PrimaryDSN is a go-sql-driver/mysql DSN for database db on the primary.
func (m *MySQL) PrimaryDSN(db string) string { return m.backend.primaryDSN(db) }

// ReplicaDSN is the same for the replica.
func (m *MySQL) ReplicaDSN(db string) string { return m.backend.replicaDSN(db) }

// PrimaryPort is the primary's TCP port (what SELECT @@port reports: the
// container provider listens on the published port inside the container).
func (m *MySQL) PrimaryPort() int { return dsnPort(m.PrimaryDSN("")) }

// ReplicaPort is the replica's TCP port.
func (m *MySQL) ReplicaPort() int { return dsnPort(m.ReplicaDSN("")) }

// Close stops the servers and removes their data (nothing for servers given
// by environment variables).
func (m *MySQL) Close() error { return m.backend.close() }

// StopApply stops the replica's applier (STOP REPLICA SQL_THREAD): the
// receiver still fetches transactions but they are not applied.
func (m *MySQL) StopApply(ctx context.Context) error {
	return execMySQL(ctx, m.ReplicaDSN(""), "STOP REPLICA SQL_THREAD")
}

// StartApply starts the replica's applier again.
func (m *MySQL) StartApply(ctx context.Context) error {
	return execMySQL(ctx, m.ReplicaDSN(""), "START REPLICA SQL_THREAD")
}

// PrimaryGTIDExecuted is the primary's @@GLOBAL.gtid_executed.
func (m *MySQL) PrimaryGTIDExecuted(ctx context.Context) (string, error) {
	var set string
	err := withMySQLDB(m.PrimaryDSN(""), func(db *sql.DB) error {
		return db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_executed").Scan(&set)
	})
	if err != nil {
		return "", fmt.Errorf("testcluster: read MySQL gtid_executed: %w", err)
	}
	// The server formats long sets over several lines.
	return strings.Join(strings.Fields(set), ""), nil
}

// WaitCaughtUp waits until the replica has executed the primary's
// gtid_executed as of the call (WAIT_FOR_EXECUTED_GTID_SET in one-second
// rounds, so ctx is honoured; the timeout argument is whole seconds on
// older servers).
func (m *MySQL) WaitCaughtUp(ctx context.Context) error {
	set, err := m.PrimaryGTIDExecuted(ctx)
	if err != nil {
		return err
	}
	if set == "" {
		return nil
	}
	return withMySQLDB(m.ReplicaDSN(""), func(db *sql.DB) error {
		for {
			var r sql.NullInt64
			if err := db.QueryRowContext(ctx, "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, 1)", set).Scan(&r); err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("testcluster: MySQL replica did not reach %s: %w", set, ctx.Err())
				}
				return fmt.Errorf("testcluster: WAIT_FOR_EXECUTED_GTID_SET: %w", err)
			}
			if r.Valid && r.Int64 == 0 {
				return nil
			}
			if ctx.Err() != nil {
				return fmt.Errorf("testcluster: MySQL replica did not reach %s: %w", set, ctx.Err())
			}
		}
	})
}

// CreateDatabase creates a fresh database on the primary, waits until the
// replica has it, and drops it when t ends.
func (m *MySQL) CreateDatabase(t testing.TB) string {
	t.Helper()
	return createReplicatedDatabase(t, m.PrimaryDSN(""), m.WaitCaughtUp)
}
