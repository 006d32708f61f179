package testcluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// MariaDB is a MariaDB primary with one GTID replica.
type MariaDB struct {
	backend mariaBackend

	// delayMu serialises SetApplyDelay; relay is the relay the replica
	// replicates through while delayed (nil: it replicates directly).
	delayMu sync.Mutex
	relay   *relay
}

// mariaBackend is what a provider implements for MariaDB.
type mariaBackend interface {
	// primaryDSN and replicaDSN return go-sql-driver/mysql DSNs of a
	// privileged user for database db ("" for none).
	primaryDSN(db string) string
	replicaDSN(db string) string
	close() error
}

// StartMariaDB starts (or connects to) a primary and its replica:
// FRESHREAD_MARIADB_PRIMARY_DSN and FRESHREAD_MARIADB_REPLICA_DSN, else the
// local mariadbd binary.
func StartMariaDB(ctx context.Context) (*MariaDB, error) {
	var (
		b   mariaBackend
		err error
	)
	switch {
	case os.Getenv(EnvMariaDBPrimary) != "":
		b, err = newEnvMySQLPair(EnvMariaDBPrimary, EnvMariaDBReplica)
	default:
		var containers bool
		if containers, err = useDocker(ctx); containers {
			b, err = startDockerMariaDB(ctx)
		} else if err == nil {
			b, err = startLocalMariaDB(ctx)
		}
	}
	if err != nil {
		return nil, err
	}
	m := &MariaDB{backend: b}
	if err := m.WaitCaughtUp(ctx); err != nil {
		b.close()
		return nil, err
	}
	return m, nil
}

// RestartPrimary stops the primary (a clean shutdown) and starts it again
// on the same port; the replica reconnects by itself (MASTER_CONNECT_RETRY
// 1 s). ErrUnsupported for servers the tests did not start.
func (m *MariaDB) RestartPrimary(ctx context.Context) error {
	r, ok := m.backend.(interface{ restartPrimary(context.Context) error })
	if !ok {
		return ErrUnsupported
	}
	return r.restartPrimary(ctx)
}

// PrimaryDSN is a go-sql-driver/mysql DSN for database db on the primary.
func (m *MariaDB) PrimaryDSN(db string) string { return m.backend.primaryDSN(db) }

// ReplicaDSN is the same for the replica.
func (m *MariaDB) ReplicaDSN(db string) string { return m.backend.replicaDSN(db) }

// Close stops the servers, removes their data and closes the apply-delay
// relay, if any (see SetApplyDelay).
func (m *MariaDB) Close() error { return errors.Join(m.backend.close(), m.closeRelay()) }

// StopApply stops the replica's SQL thread (STOP SLAVE SQL_THREAD): events
// still arrive but are not applied.
func (m *MariaDB) StopApply(ctx context.Context) error {
	return execMySQL(ctx, m.ReplicaDSN(""), "STOP SLAVE SQL_THREAD")
}

// StartApply starts the replica's SQL thread again.
func (m *MariaDB) StartApply(ctx context.Context) error {
	return execMySQL(ctx, m.ReplicaDSN(""), "START SLAVE SQL_THREAD")
}

// ReplicaStatus is the replica's SHOW SLAVE STATUS, column to value (no
// replication configured: an empty map).
func (m *MariaDB) ReplicaStatus(ctx context.Context) (st map[string]string, err error) {
	err = withMySQLDB(m.ReplicaDSN(""), func(db *sql.DB) error {
		st, err = showSlaveStatus(ctx, db)
		return err
	})
	return st, err
}

// PrimaryGTID is the primary's @@gtid_binlog_pos.
func (m *MariaDB) PrimaryGTID(ctx context.Context) (string, error) {
	var pos string
	err := withMySQLDB(m.PrimaryDSN(""), func(db *sql.DB) error {
		return db.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&pos)
	})
	return pos, err
}

// WaitCaughtUp waits until the replica has applied the primary's binlog
// position as of the call (MASTER_GTID_WAIT, in short rounds so ctx is
// honoured).
func (m *MariaDB) WaitCaughtUp(ctx context.Context) error {
	pos, err := m.PrimaryGTID(ctx)
	if err != nil {
		return err
	}
	if pos == "" {
		return nil
	}
	return withMySQLDB(m.ReplicaDSN(""), func(db *sql.DB) error {
		for {
			var r sql.NullInt64
			if err := db.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, 0.2)", pos).Scan(&r); err != nil {
				return fmt.Errorf("testcluster: MASTER_GTID_WAIT: %w", err)
			}
			if r.Valid && r.Int64 == 0 {
				return nil
			}
			if ctx.Err() != nil {
				return fmt.Errorf("testcluster: MariaDB replica did not reach %s: %w", pos, ctx.Err())
			}
		}
	})
}

// CreateDatabase creates a fresh database on the primary, waits until the
// replica has it, and drops it when t ends.
func (m *MariaDB) CreateDatabase(t testing.TB) string {
	t.Helper()
	return createReplicatedDatabase(t, m.PrimaryDSN(""), m.WaitCaughtUp)
}

// NewDatabase creates a fresh database on the primary and waits until
// the replica has it: CreateDatabase without a testing.TB, so nothing
// drops it.
func (m *MariaDB) NewDatabase(ctx context.Context) (string, error) {
	name := uniqueName("fr")
	if err := execMySQL(ctx, m.PrimaryDSN(""), "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	if err := m.WaitCaughtUp(ctx); err != nil {
		return "", err
	}
	return name, nil
}

// Host is the address both servers are reached at: 127.0.0.1 for local
// servers, the network's gateway or the engine's address for containers.
func (m *MariaDB) Host() string {
	c, err := mysql.ParseDSN(m.PrimaryDSN(""))
	if err != nil {
		return ""
	}
	host, _, _ := strings.Cut(c.Addr, ":")
	return host
}

// PrimaryPort is the primary's TCP port (what SELECT @@port reports).
func (m *MariaDB) PrimaryPort() int { return dsnPort(m.PrimaryDSN("")) }

// ReplicaPort is the replica's TCP port.
func (m *MariaDB) ReplicaPort() int { return dsnPort(m.ReplicaDSN("")) }

func dsnPort(dsn string) int {
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		return 0
	}
	_, port, _ := strings.Cut(c.Addr, ":")
	n, _ := strconv.Atoi(port)
	return n
}

// mariaReplicationArgs are the options every MariaDB node of a pair gets,
// whichever provider starts it: GTID replication with row binlogs, and
// small, fast (not durable) storage.
func mariaReplicationArgs(serverID int) []string {
	return []string{
		"--server-id=" + strconv.Itoa(serverID),
		"--log-bin=mysql-bin",
		"--log-slave-updates",
		"--binlog-format=ROW",
		"--gtid-strict-mode=1",
		"--skip-name-resolve",
		"--innodb-buffer-pool-size=32M",
		"--innodb-flush-log-at-trx-commit=2",
		"--sync-binlog=0",
		"--max-connections=500", // a fleet of processes (workload's fleet bench) keeps a few each
	}
}
