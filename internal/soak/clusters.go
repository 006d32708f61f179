package soak

import (
	"context"
	"testing"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/testcluster"
	"github.com/freshread/freshread/plugin"
)

// Postgres is a soak Cluster over a testcluster PostgreSQL primary and its
// streaming replicas.
type Postgres struct{ *testcluster.Postgres }

func (c Postgres) Engine() string                     { return "postgres" }
func (c Postgres) CreateDatabase(t testing.TB) string { return c.Postgres.CreateDatabase(t) }
func (c Postgres) Primary(db string) gorm.Dialector   { return postgres.Open(c.PrimaryDSN(db)) }

func (c Postgres) DSNs(db string) (string, string, []string) {
	var rs []string
	for i := range c.Postgres.Replicas() {
		rs = append(rs, c.ReplicaDSN(i, db))
	}
	return "postgres", c.PrimaryDSN(db), rs
}
func (c Postgres) PortExpr() string                       { return "inet_server_port()" }
func (c Postgres) WaitCaughtUp(ctx context.Context) error { return c.Postgres.WaitCaughtUp(ctx) }

func (c Postgres) Replicas(db string) []plugin.Replica {
	var out []plugin.Replica
	for i := range c.Postgres.Replicas() {
		out = append(out, plugin.Replica{Name: "r" + string(rune('0'+i)), Dialector: postgres.Open(c.ReplicaDSN(i, db))})
	}
	return out
}

func (c Postgres) ReplicaPorts() []int {
	var out []int
	for i := range c.Postgres.Replicas() {
		out = append(out, c.ReplicaPort(i))
	}
	return out
}

// Faults: replay paused on every replica, an apply delay, a replica
// stopped, the primary restarted.
func (c Postgres) Faults() []Fault {
	all := func(f func(ctx context.Context, i int) error) func(context.Context) error {
		return func(ctx context.Context) error {
			for i := range c.Postgres.Replicas() {
				if err := f(ctx, i); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return []Fault{
		{Name: "replay-paused", Inject: all(c.PauseReplay), Heal: all(c.ResumeReplay)},
		{Name: "apply-delay-200ms",
			Inject: all(func(ctx context.Context, i int) error { return c.SetApplyDelay(ctx, i, 200*time.Millisecond) }),
			Heal:   all(func(ctx context.Context, i int) error { return c.SetApplyDelay(ctx, i, 0) })},
		{Name: "replica-stopped",
			Inject: func(ctx context.Context) error { return c.StopReplica(ctx, 0) },
			Heal:   func(ctx context.Context) error { return c.StartReplica(ctx, 0) }},
		{Name: "primary-restart", PrimaryDown: true,
			Inject: func(ctx context.Context) error { return c.RestartPrimary(ctx) }},
	}
}

// MariaDB is a soak Cluster over a testcluster MariaDB primary and replica.
type MariaDB struct{ *testcluster.MariaDB }

func (c MariaDB) Engine() string                     { return "mariadb" }
func (c MariaDB) CreateDatabase(t testing.TB) string { return c.MariaDB.CreateDatabase(t) }
func (c MariaDB) Primary(db string) gorm.Dialector   { return mysql.Open(c.PrimaryDSN(db)) }

func (c MariaDB) DSNs(db string) (string, string, []string) {
	return "mysql", c.PrimaryDSN(db), []string{c.ReplicaDSN(db)}
}
func (c MariaDB) PortExpr() string                       { return "@@port" }
func (c MariaDB) WaitCaughtUp(ctx context.Context) error { return c.MariaDB.WaitCaughtUp(ctx) }
func (c MariaDB) ReplicaPorts() []int                    { return []int{c.ReplicaPort()} }

func (c MariaDB) Replicas(db string) []plugin.Replica {
	return []plugin.Replica{{Name: "r0", Dialector: mysql.Open(c.ReplicaDSN(db))}}
}

// Faults: the SQL thread stopped, an apply delay through the relay, the
// primary restarted.
func (c MariaDB) Faults() []Fault {
	return []Fault{
		{Name: "apply-stopped", Inject: c.StopApply, Heal: c.StartApply},
		{Name: "apply-delay-200ms",
			Inject: func(ctx context.Context) error { return c.SetApplyDelay(ctx, 200*time.Millisecond) },
			Heal:   func(ctx context.Context) error { return c.SetApplyDelay(ctx, 0) }},
		{Name: "primary-restart", PrimaryDown: true, Inject: c.RestartPrimary},
	}
}
