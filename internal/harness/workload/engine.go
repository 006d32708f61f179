package workload

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// The engines Options.Engine accepts.
const (
	Postgres = "postgres"
	MariaDB  = "mariadb"
)

// cluster is what the workload needs of an engine's testcluster servers.
type cluster interface {
	describe() string
	replicas() int
	primaryPort() int
	// driver is the database/sql driver name of the DSNs.
	driver() string
	primaryDSN(db string) string
	replicaDSN(i int, db string) string
	dialector(conn *sql.DB) gorm.Dialector
	setApplyDelay(ctx context.Context, d time.Duration) error
	newDatabase(ctx context.Context) (string, error)
	dropDatabase(ctx context.Context, name string) error
	waitCaughtUp(ctx context.Context) error
	// seedSQL returns the statements creating table t with one row per
	// user (ids 1…users) and version 0.
	seedSQL(t string, users int) []string
	// readColumns is the select list of a read: the row's version and the
	// answering server's port.
	readColumns() string
}

func openCluster(engine string) (cluster, error) {
	switch engine {
	case Postgres:
		pg, err := testcluster.SharedPostgres()
		if err != nil {
			return nil, err
		}
		if pg.Replicas() < 2 {
			return nil, fmt.Errorf("workload: need 2 replicas, the cluster has %d", pg.Replicas())
		}
		return pgCluster{pg}, nil
	case MariaDB:
		m, err := testcluster.SharedMariaDB()
		if err != nil {
			return nil, err
		}
		return mariaCluster{m: m}, nil
	}
	return nil, fmt.Errorf("workload: unknown engine %q (want %q or %q)", engine, Postgres, MariaDB)
}

// pgCluster: PostgreSQL primary with two streaming replicas, delayed with
// recovery_min_apply_delay.
type pgCluster struct{ pg *testcluster.Postgres }

func (c pgCluster) describe() string {
	return fmt.Sprintf("PostgreSQL primary :%d, replicas :%d :%d", c.pg.PrimaryPort(), c.pg.ReplicaPort(0), c.pg.ReplicaPort(1))
}
func (c pgCluster) replicas() int                      { return 2 }
func (c pgCluster) primaryPort() int                   { return c.pg.PrimaryPort() }
func (c pgCluster) driver() string                     { return "pgx" }
func (c pgCluster) primaryDSN(db string) string        { return c.pg.PrimaryDSN(db) }
func (c pgCluster) replicaDSN(i int, db string) string { return c.pg.ReplicaDSN(i, db) }
func (c pgCluster) dialector(conn *sql.DB) gorm.Dialector {
	return postgres.New(postgres.Config{Conn: conn})
}
func (c pgCluster) setApplyDelay(ctx context.Context, d time.Duration) error {
	for i := 0; i < 2; i++ {
		if err := c.pg.SetApplyDelay(ctx, i, d); err != nil {
			return err
		}
	}
	return nil
}
func (c pgCluster) newDatabase(ctx context.Context) (string, error) { return c.pg.NewDatabase(ctx) }
func (c pgCluster) dropDatabase(ctx context.Context, name string) error {
	return c.pg.DropDatabase(ctx, name)
}
func (c pgCluster) waitCaughtUp(ctx context.Context) error { return c.pg.WaitCaughtUp(ctx) }
func (c pgCluster) seedSQL(t string, users int) []string {
	return []string{fmt.Sprintf("CREATE TABLE %[1]s (id int PRIMARY KEY, version bigint NOT NULL DEFAULT 0); "+
		"INSERT INTO %[1]s (id) SELECT generate_series(1, %[2]d)", t, users)}
}
func (c pgCluster) readColumns() string { return "version, inet_server_port() AS port" }

// mariaCluster: MariaDB primary with one GTID replica, delayed by
// testcluster.MariaDB.SetApplyDelay (a relay that holds the primary's
// binlog stream for the delay).
type mariaCluster struct{ m *testcluster.MariaDB }

func (c mariaCluster) describe() string {
	return fmt.Sprintf("MariaDB primary :%d, replica :%d", c.m.PrimaryPort(), c.m.ReplicaPort())
}
func (c mariaCluster) replicas() int                      { return 1 }
func (c mariaCluster) primaryPort() int                   { return c.m.PrimaryPort() }
func (c mariaCluster) driver() string                     { return "mysql" }
func (c mariaCluster) primaryDSN(db string) string        { return c.m.PrimaryDSN(db) }
func (c mariaCluster) replicaDSN(_ int, db string) string { return c.m.ReplicaDSN(db) }
func (c mariaCluster) dialector(conn *sql.DB) gorm.Dialector {
	return mysql.New(mysql.Config{Conn: conn})
}
func (c mariaCluster) setApplyDelay(ctx context.Context, d time.Duration) error {
	return c.m.SetApplyDelay(ctx, d)
}

var mariaSeq atomic.Int64

func (c mariaCluster) newDatabase(ctx context.Context) (string, error) {
	name := fmt.Sprintf("fr_workload_%d_%d", time.Now().Unix(), mariaSeq.Add(1))
	if err := c.exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	if err := c.m.WaitCaughtUp(ctx); err != nil {
		return "", err
	}
	return name, nil
}
func (c mariaCluster) dropDatabase(ctx context.Context, name string) error {
	if !strings.HasPrefix(name, "fr_workload_") {
		return fmt.Errorf("workload: refusing to drop %q", name)
	}
	return c.exec(ctx, "DROP DATABASE IF EXISTS "+name)
}
func (c mariaCluster) exec(ctx context.Context, q string) error {
	db, err := sql.Open("mysql", c.m.PrimaryDSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("workload: %s: %w", q, err)
	}
	return nil
}
func (c mariaCluster) waitCaughtUp(ctx context.Context) error { return c.m.WaitCaughtUp(ctx) }
func (c mariaCluster) seedSQL(t string, users int) []string {
	var b strings.Builder
	fmt.Fprintf(&b, "INSERT INTO %s (id) VALUES ", t)
	for id := 1; id <= users; id++ {
		if id > 1 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "(%d)", id)
	}
	return []string{
		fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, version bigint NOT NULL DEFAULT 0) ENGINE=InnoDB", t),
		b.String(),
	}
}
func (c mariaCluster) readColumns() string { return "version, @@port AS port" }
