package integration_test

// MySQL 8 tests. They run where a MySQL pair is reachable: the
// FRESHREAD_MYSQL_PRIMARY_DSN/FRESHREAD_MYSQL_REPLICA_DSN servers, or
// mysql:8.4 containers on a Docker engine. With neither they skip with a
// one-line reason, even when FRESHREAD_REQUIRE_INTEGRATION=1 (see
// internal/harness/testcluster/mysql_require.go).

import (
	"context"
	"strings"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

type mysqlCluster struct{ *testcluster.MySQL }

func (c mysqlCluster) replicas() int                          { return 1 }
func (c mysqlCluster) primaryPort() int                       { return c.PrimaryPort() }
func (c mysqlCluster) replicaPort(int) int                    { return c.ReplicaPort() }
func (c mysqlCluster) pause(ctx context.Context, _ int) error { return c.StopApply(ctx) }
func (c mysqlCluster) resume(ctx context.Context, _ int) error {
	return c.StartApply(ctx)
}
func (c mysqlCluster) waitCaughtUp(ctx context.Context) error  { return c.WaitCaughtUp(ctx) }
func (c mysqlCluster) primary(db string) gorm.Dialector        { return mysql.Open(c.PrimaryDSN(db)) }
func (c mysqlCluster) replica(_ int, db string) gorm.Dialector { return mysql.Open(c.ReplicaDSN(db)) }
func (c mysqlCluster) createDatabase(t testing.TB) string      { return c.CreateDatabase(t) }
func (c mysqlCluster) portExpr() string                        { return "@@port" }

// newMySQLEnv is newEnv on the MySQL primary and its replica.
func newMySQLEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	return newEnvOn(t, mysqlCluster{testcluster.MySQLFor(t)}, nil, opts...)
}

// TestMySQLWritePathsNeverReadStale: every write path, with the replica's
// applier stopped (STOP REPLICA SQL_THREAD): the next read of the written
// table is fresh and served by the primary, an untouched table by the
// replica, and after START REPLICA SQL_THREAD and catch-up the written table
// by the replica.
func TestMySQLWritePathsNeverReadStale(t *testing.T) {
	testcluster.MySQLFor(t) // skip once, not in every subtest
	for i, wp := range writePathsWithoutReturning() {
		t.Run(wp.name, func(t *testing.T) {
			e := newMySQLEnv(t)
			runWritePath(t, e, wp, uint(i+1))
		})
	}
}

// TestMySQLCausalWait: with MaxWait, a read the replica has not applied yet
// waits on the replica (WAIT_FOR_EXECUTED_GTID_SET) and is served there,
// fresh.
func TestMySQLCausalWait(t *testing.T) {
	checkWaitedRead(t, newMySQLEnv(t, withConfig(withMaxWait)))
}

// TestMySQLRefusesGTIDModeOff: db.Use fails with a configuration error
// naming gtid_mode when the MySQL primary has gtid_mode=OFF (its positions
// would mean nothing). Needs a Docker engine for the standalone server.
func TestMySQLRefusesGTIDModeOff(t *testing.T) {
	dsn := testcluster.MySQLWithoutGTIDFor(t)
	db, err := gorm.Open(mysql.Open(dsn), quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDB(db) })
	var mode string
	if err := db.Raw("SELECT @@GLOBAL.gtid_mode").Scan(&mode).Error; err != nil || mode != "OFF" {
		t.Fatalf("test server gtid_mode %q (err %v), want OFF", mode, err)
	}
	p := plugin.New(plugin.Config{
		Store:    lsnstore.NewMemory(),
		Replicas: []plugin.Replica{{Name: "r0", Dialector: mysql.Open(dsn)}},
	})
	t.Cleanup(func() { p.Close() })
	err = db.Use(p)
	if err == nil {
		t.Fatal("db.Use accepted a MySQL primary with gtid_mode=OFF")
	}
	if !plugin.IsConfig(err) || !strings.Contains(err.Error(), "gtid_mode") {
		t.Fatalf("db.Use: %v; want a configuration error naming gtid_mode", err)
	}
}
