package reshardload

import (
	"context"
	"fmt"

	gormmysql "gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// The engines of the shard databases (ProcessConfig.Engine).
const (
	EnginePostgres = "postgres"
	EngineMariaDB  = "mariadb"
)

// shardServer is the server that holds a scenario's shard databases (and
// its default database): PostgreSQL with streaming replicas, or MariaDB
// with its GTID replica.
type shardServer interface {
	engine() string
	newDatabase(ctx context.Context) (string, error)
	primaryDSN(db string) string
	replicaDSNs(db string) []string
	waitCaughtUp(ctx context.Context) error
}

type pgServer struct{ pg *testcluster.Postgres }

func (s pgServer) engine() string { return EnginePostgres }
func (s pgServer) newDatabase(ctx context.Context) (string, error) {
	return s.pg.NewDatabase(ctx)
}
func (s pgServer) primaryDSN(db string) string { return s.pg.PrimaryDSN(db) }
func (s pgServer) replicaDSNs(db string) []string {
	var out []string
	for i := 0; i < s.pg.Replicas(); i++ {
		out = append(out, s.pg.ReplicaDSN(i, db))
	}
	return out
}
func (s pgServer) waitCaughtUp(ctx context.Context) error { return s.pg.WaitCaughtUp(ctx) }

type mariaServer struct{ m *testcluster.MariaDB }

func (s mariaServer) engine() string { return EngineMariaDB }
func (s mariaServer) newDatabase(ctx context.Context) (string, error) {
	return s.m.NewDatabase(ctx)
}
func (s mariaServer) primaryDSN(db string) string    { return s.m.PrimaryDSN(db) }
func (s mariaServer) replicaDSNs(db string) []string { return []string{s.m.ReplicaDSN(db)} }
func (s mariaServer) waitCaughtUp(ctx context.Context) error {
	return s.m.WaitCaughtUp(ctx)
}

// server is the env's shard server: MariaDB when env.Maria is set.
func (env Env) server() shardServer {
	if env.Maria != nil {
		return mariaServer{env.Maria}
	}
	return pgServer{env.PG}
}

// Engine names the engine of the env's shard databases.
func (env Env) Engine() string { return env.server().engine() }

// dialector opens dsn with engine's GORM driver.
func dialector(engine, dsn string) gorm.Dialector {
	if engine == EngineMariaDB {
		return gormmysql.Open(dsn)
	}
	return postgres.Open(dsn)
}

// driverName is engine's database/sql driver: the one reshard.Shard.DB
// is opened with.
func driverName(engine string) string {
	if engine == EngineMariaDB {
		return "mysql"
	}
	return "pgx"
}

// checkEngine refuses an engine this package does not know.
func checkEngine(engine string) error {
	switch engine {
	case "", EnginePostgres, EngineMariaDB:
		return nil
	}
	return fmt.Errorf("reshardload: unknown engine %q (want %q or %q)", engine, EnginePostgres, EngineMariaDB)
}
