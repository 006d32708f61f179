package testcluster

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// What the MariaDB and MySQL pairs share: opening a DSN, running
// statements on one connection, creating a database on the primary that
// the replica has too, and the environment-variable provider.

func withMySQLDB(dsn string, f func(*sql.DB) error) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	defer db.Close()
	return f(db)
}

// execMySQL runs stmts in order on one connection (they may depend on each
// other's session).
func execMySQL(ctx context.Context, dsn string, stmts ...string) error {
	return withMySQLDB(dsn, func(db *sql.DB) error {
		conn, err := db.Conn(ctx)
		if err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
		defer conn.Close()
		for _, s := range stmts {
			if _, err := conn.ExecContext(ctx, s); err != nil {
				return fmt.Errorf("testcluster: %s: %w", s, err)
			}
		}
		return nil
	})
}

// createReplicatedDatabase creates a fresh database on the primary, waits
// (wait) until the replica has it, and drops it when t ends.
func createReplicatedDatabase(t testing.TB, primaryDSN string, wait func(context.Context) error) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := uniqueName("fr")
	if err := execMySQL(ctx, primaryDSN, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	if err := wait(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = execMySQL(ctx, primaryDSN, "DROP DATABASE IF EXISTS "+name)
	})
	return name
}

// envMySQLPair is a primary and replica named by two environment
// variables holding go-sql-driver/mysql DSNs.
type envMySQLPair struct {
	primary, replica *mysql.Config
}

func newEnvMySQLPair(primaryVar, replicaVar string) (*envMySQLPair, error) {
	p, err := mysql.ParseDSN(os.Getenv(primaryVar))
	if err != nil {
		return nil, fmt.Errorf("testcluster: %s is not a valid DSN", primaryVar)
	}
	r, err := mysql.ParseDSN(os.Getenv(replicaVar))
	if err != nil || strings.TrimSpace(os.Getenv(replicaVar)) == "" {
		return nil, fmt.Errorf("testcluster: %s is set but %s is not a valid DSN", primaryVar, replicaVar)
	}
	return &envMySQLPair{primary: p, replica: r}, nil
}

func (e *envMySQLPair) primaryDSN(db string) string { return dsnWithDB(e.primary, db) }
func (e *envMySQLPair) replicaDSN(db string) string { return dsnWithDB(e.replica, db) }
func (e *envMySQLPair) close() error                { return nil }

func dsnWithDB(c *mysql.Config, db string) string {
	cc := c.Clone()
	cc.DBName = db
	cc.ParseTime = true
	return cc.FormatDSN()
}
