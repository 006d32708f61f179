package testcluster

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MariaDB is a MariaDB primary with one GTID replica.
type MariaDB struct {
	backend mariaBackend
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
		b, err = newEnvMariaDB()
	case dockerAvailable(ctx):
		b, err = startDockerMariaDB(ctx)
	default:
		b, err = startLocalMariaDB(ctx)
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

// PrimaryDSN is a go-sql-driver/mysql DSN for database db on the primary.
func (m *MariaDB) PrimaryDSN(db string) string { return m.backend.primaryDSN(db) }

// ReplicaDSN is the same for the replica.
func (m *MariaDB) ReplicaDSN(db string) string { return m.backend.replicaDSN(db) }

// Close stops the servers and removes their data.
func (m *MariaDB) Close() error { return m.backend.close() }

func (m *MariaDB) withDB(ctx context.Context, dsn string, f func(*sql.DB) error) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	defer db.Close()
	return f(db)
}

func (m *MariaDB) exec(ctx context.Context, dsn string, stmts ...string) error {
	return m.withDB(ctx, dsn, func(db *sql.DB) error {
		for _, s := range stmts {
			if _, err := db.ExecContext(ctx, s); err != nil {
				return fmt.Errorf("testcluster: %s: %w", s, err)
			}
		}
		return nil
	})
}

// StopApply stops the replica's SQL thread (STOP SLAVE SQL_THREAD): events
// still arrive but are not applied.
func (m *MariaDB) StopApply(ctx context.Context) error {
	return m.exec(ctx, m.ReplicaDSN(""), "STOP SLAVE SQL_THREAD")
}

// StartApply starts the replica's SQL thread again.
func (m *MariaDB) StartApply(ctx context.Context) error {
	return m.exec(ctx, m.ReplicaDSN(""), "START SLAVE SQL_THREAD")
}

// PrimaryGTID is the primary's @@gtid_binlog_pos.
func (m *MariaDB) PrimaryGTID(ctx context.Context) (string, error) {
	var pos string
	err := m.withDB(ctx, m.PrimaryDSN(""), func(db *sql.DB) error {
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
	return m.withDB(ctx, m.ReplicaDSN(""), func(db *sql.DB) error {
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := uniqueName("fr")
	if err := m.exec(ctx, m.PrimaryDSN(""), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	if err := m.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = m.exec(ctx, m.PrimaryDSN(""), "DROP DATABASE IF EXISTS "+name)
	})
	return name
}

type envMariaDB struct {
	primary, replica *mysql.Config
}

func newEnvMariaDB() (*envMariaDB, error) {
	p, err := mysql.ParseDSN(os.Getenv(EnvMariaDBPrimary))
	if err != nil {
		return nil, fmt.Errorf("testcluster: %s is not a valid DSN", EnvMariaDBPrimary)
	}
	r, err := mysql.ParseDSN(os.Getenv(EnvMariaDBReplica))
	if err != nil || strings.TrimSpace(os.Getenv(EnvMariaDBReplica)) == "" {
		return nil, fmt.Errorf("testcluster: %s is set but %s is not a valid DSN", EnvMariaDBPrimary, EnvMariaDBReplica)
	}
	return &envMariaDB{primary: p, replica: r}, nil
}

func dsnWithDB(c *mysql.Config, db string) string {
	cc := c.Clone()
	cc.DBName = db
	cc.ParseTime = true
	return cc.FormatDSN()
}

func (e *envMariaDB) primaryDSN(db string) string { return dsnWithDB(e.primary, db) }
func (e *envMariaDB) replicaDSN(db string) string { return dsnWithDB(e.replica, db) }
func (e *envMariaDB) close() error                { return nil }

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
