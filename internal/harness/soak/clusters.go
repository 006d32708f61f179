package soak

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/plugin"
)

// Postgres is a soak Cluster over a testcluster PostgreSQL primary and its
// streaming replicas. The plugins reach replica 0 through a relay that the
// replica-conn-stalled fault stalls (NewPostgres).
type Postgres struct {
	*testcluster.Postgres
	relay *testcluster.Relay
}

// NewPostgres is the soak Cluster of pg, its relay closed when t ends.
func NewPostgres(t testing.TB, pg *testcluster.Postgres) Postgres {
	return Postgres{Postgres: pg, relay: newRelay(t, pg.Host(), pg.ReplicaPort(0))}
}

// newRelay starts a relay (on 127.0.0.1) in front of host:port.
func newRelay(t testing.TB, host string, port int) *testcluster.Relay {
	t.Helper()
	r, err := testcluster.NewRelay(net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// replicaDSN is replica i's DSN for the plugins: replica 0's through the
// relay.
func (c Postgres) replicaDSN(i int, db string) string {
	if i != 0 || c.relay == nil {
		return c.ReplicaDSN(i, db)
	}
	return c.replicaDSNAt(i, db, c.relay.Port())
}

// replicaDSNAt is replica i's DSN with its address 127.0.0.1:port.
func (c Postgres) replicaDSNAt(i int, db string, port int) string {
	u, err := url.Parse(c.ReplicaDSN(i, db))
	if err != nil {
		panic(fmt.Sprintf("soak: replica DSN: %v", err)) // testcluster's own
	}
	u.Host = "127.0.0.1:" + strconv.Itoa(port)
	return u.String()
}

// replicaAddr: replica 0 through the stall relay, when there is one.
func (c Postgres) replicaAddr() (string, int) {
	if c.relay != nil {
		return "127.0.0.1", c.relay.Port()
	}
	return c.Host(), c.ReplicaPort(0)
}

func (c Postgres) replicaDSNsVia(db string, port int) []string {
	_, _, rs := c.DSNs(db)
	rs[0] = c.replicaDSNAt(0, db, port)
	return rs
}

func (c Postgres) Engine() string                     { return "postgres" }
func (c Postgres) CreateDatabase(t testing.TB) string { return c.Postgres.CreateDatabase(t) }
func (c Postgres) Primary(db string) gorm.Dialector   { return postgres.Open(c.PrimaryDSN(db)) }

func (c Postgres) DSNs(db string) (string, string, []string) {
	var rs []string
	for i := range c.Postgres.Replicas() {
		rs = append(rs, c.replicaDSN(i, db))
	}
	return "postgres", c.PrimaryDSN(db), rs
}
func (c Postgres) PortExpr() string                       { return "inet_server_port()" }
func (c Postgres) WaitCaughtUp(ctx context.Context) error { return c.Postgres.WaitCaughtUp(ctx) }

func (c Postgres) Replicas(db string) []plugin.Replica {
	var out []plugin.Replica
	for i := range c.Postgres.Replicas() {
		out = append(out, plugin.Replica{Name: replicaName(i), Dialector: postgres.Open(c.replicaDSN(i, db))})
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

// stallFault stalls the plugins' connections to a replica (its answers
// held by the relay) for 4 s: longer than the plugin's StallTimeout, so
// that the slowest read begun during it shows the bound.
func stallFault(r *testcluster.Relay) Fault {
	return Fault{Name: "replica-conn-stalled", For: 4 * time.Second,
		Inject: func(context.Context) error { r.Stall(true); return nil },
		Heal:   func(context.Context) error { r.Stall(false); return nil }}
}

// Faults: replay paused on every replica, an apply delay, a replica
// stopped, the plugins' connections to a replica stalled, the primary
// restarted.
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
		stallFault(c.relay),
		{Name: "primary-restart", PrimaryDown: true,
			Inject: func(ctx context.Context) error { return c.RestartPrimary(ctx) }},
	}
}

// MariaDB is a soak Cluster over a testcluster MariaDB primary and replica.
// The plugins reach the replica through a relay that the
// replica-conn-stalled fault stalls (NewMariaDB).
type MariaDB struct {
	*testcluster.MariaDB
	relay *testcluster.Relay
}

// NewMariaDB is the soak Cluster of m, its relay closed when t ends.
func NewMariaDB(t testing.TB, m *testcluster.MariaDB) MariaDB {
	return MariaDB{MariaDB: m, relay: newRelay(t, m.Host(), m.ReplicaPort())}
}

// replicaDSN is the replica's DSN for the plugins, through the relay.
func (c MariaDB) replicaDSN(db string) string {
	if c.relay == nil {
		return c.ReplicaDSN(db)
	}
	return c.replicaDSNAt(db, c.relay.Port())
}

// replicaDSNAt is the replica's DSN with its address 127.0.0.1:port.
func (c MariaDB) replicaDSNAt(db string, port int) string {
	cfg, err := mysqldrv.ParseDSN(c.ReplicaDSN(db))
	if err != nil {
		panic(fmt.Sprintf("soak: replica DSN: %v", err)) // testcluster's own
	}
	cfg.Addr = "127.0.0.1:" + strconv.Itoa(port)
	return cfg.FormatDSN()
}

// replicaAddr: the replica through the stall relay, when there is one.
func (c MariaDB) replicaAddr() (string, int) {
	if c.relay != nil {
		return "127.0.0.1", c.relay.Port()
	}
	return c.Host(), c.ReplicaPort()
}

func (c MariaDB) replicaDSNsVia(db string, port int) []string {
	return []string{c.replicaDSNAt(db, port)}
}

func (c MariaDB) Engine() string                     { return "mariadb" }
func (c MariaDB) CreateDatabase(t testing.TB) string { return c.MariaDB.CreateDatabase(t) }
func (c MariaDB) Primary(db string) gorm.Dialector   { return mysql.Open(c.PrimaryDSN(db)) }

func (c MariaDB) DSNs(db string) (string, string, []string) {
	return "mysql", c.PrimaryDSN(db), []string{c.replicaDSN(db)}
}
func (c MariaDB) PortExpr() string                       { return "@@port" }
func (c MariaDB) WaitCaughtUp(ctx context.Context) error { return c.MariaDB.WaitCaughtUp(ctx) }
func (c MariaDB) ReplicaPorts() []int                    { return []int{c.ReplicaPort()} }

func (c MariaDB) Replicas(db string) []plugin.Replica {
	return []plugin.Replica{{Name: "r0", Dialector: mysql.Open(c.replicaDSN(db))}}
}

// Faults: the SQL thread stopped, an apply delay through the relay, the
// plugins' connections to the replica stalled, the primary restarted.
func (c MariaDB) Faults() []Fault {
	return []Fault{
		{Name: "apply-stopped", Inject: c.StopApply, Heal: c.StartApply},
		{Name: "apply-delay-200ms",
			Inject: func(ctx context.Context) error { return c.SetApplyDelay(ctx, 200*time.Millisecond) },
			Heal:   func(ctx context.Context) error { return c.SetApplyDelay(ctx, 0) }},
		stallFault(c.relay),
		{Name: "primary-restart", PrimaryDown: true, Inject: c.RestartPrimary},
	}
}
