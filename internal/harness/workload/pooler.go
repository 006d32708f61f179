package workload

import (
	"context"
	"fmt"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// The poolers Options.Pooler accepts: PgBouncer in front of the
// PostgreSQL primary and each replica (testcluster.StartPgBouncer), in
// transaction mode (pgx opened with default_query_exec_mode=simple_protocol,
// which transaction pooling needs) or in session mode (pgx's default).
const (
	PgBouncer        = "pgbouncer"
	PgBouncerSession = "pgbouncer-session"
)

// bouncedPG is the PostgreSQL cluster with the workload's connections, the
// plugin's included, through PgBouncer; seeding, delays and catch-up go to
// the servers directly.
type bouncedPG struct {
	pgCluster
	b    *testcluster.PgBouncer
	exec string // pgx's default_query_exec_mode, "" for its default
}

func (c bouncedPG) describe() string {
	return fmt.Sprintf("%s, through PgBouncer (pool_mode = %s) :%d :%d :%d",
		c.pgCluster.describe(), c.b.Mode(), c.b.PrimaryPort(), c.b.ReplicaPort(0), c.b.ReplicaPort(1))
}

func (c bouncedPG) primaryDSN(db string) string {
	return testcluster.WithExecMode(c.b.PrimaryDSN(db), c.exec)
}

func (c bouncedPG) replicaDSN(i int, db string) string {
	return testcluster.WithExecMode(c.b.ReplicaDSN(i, db), c.exec)
}

// withPooler puts the pooler named pooler in front of cl; the returned
// function stops it.
func withPooler(ctx context.Context, cl cluster, pooler string) (cluster, func(), error) {
	if pooler == "" {
		return cl, func() {}, nil
	}
	pg, ok := cl.(pgCluster)
	if !ok {
		return nil, nil, fmt.Errorf("workload: pooler %q needs the postgres engine", pooler)
	}
	mode, exec := testcluster.PoolTransaction, "simple_protocol"
	switch pooler {
	case PgBouncer:
	case PgBouncerSession:
		mode, exec = testcluster.PoolSession, ""
	default:
		return nil, nil, fmt.Errorf("workload: unknown pooler %q (want %q or %q)", pooler, PgBouncer, PgBouncerSession)
	}
	b, err := testcluster.StartPgBouncer(ctx, pg.pg, mode)
	if err != nil {
		return nil, nil, err
	}
	return bouncedPG{pgCluster: pg, b: b, exec: exec}, func() { b.Close() }, nil
}
