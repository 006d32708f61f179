package testcluster_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

func TestMain(m *testing.M) {
	os.Exit(testcluster.Run(m, testcluster.Spec{PostgresReplicas: 2}))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func readValue(t *testing.T, db *sql.DB, q string) string {
	t.Helper()
	var v string
	if err := db.QueryRow(q).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

func TestPostgresPauseHidesWriteUntilResume(t *testing.T) {
	pg := testcluster.PostgresFor(t)
	ctx := ctxT(t)
	name := pg.CreateDatabase(t)
	primary := open(t, "pgx", pg.PrimaryDSN(name))
	mustExec(t, primary, "CREATE TABLE kv (k int PRIMARY KEY, v text)")
	mustExec(t, primary, "INSERT INTO kv VALUES (1, 'old')")
	if err := pg.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < pg.Replicas(); i++ {
		replica := open(t, "pgx", pg.ReplicaDSN(i, name))
		if err := pg.PauseReplay(ctx, i); err != nil {
			t.Fatal(err)
		}
		mustExec(t, primary, "UPDATE kv SET v = 'new' WHERE k = 1")
		if got := readValue(t, replica, "SELECT v FROM kv WHERE k = 1"); got != "old" {
			t.Fatalf("replica %d paused: got %q, want the old value", i, got)
		}
		if got := readValue(t, primary, "SELECT v FROM kv WHERE k = 1"); got != "new" {
			t.Fatalf("primary: got %q", got)
		}
		if err := pg.ResumeReplay(ctx, i); err != nil {
			t.Fatal(err)
		}
		if err := pg.WaitCaughtUp(ctx); err != nil {
			t.Fatal(err)
		}
		if got := readValue(t, replica, "SELECT v FROM kv WHERE k = 1"); got != "new" {
			t.Fatalf("replica %d resumed: got %q, want new", i, got)
		}
		mustExec(t, primary, "UPDATE kv SET v = 'old' WHERE k = 1")
		if err := pg.WaitCaughtUp(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPostgresServesFromReplicaPort(t *testing.T) {
	pg := testcluster.PostgresFor(t)
	for i := 0; i < pg.Replicas(); i++ {
		replica := open(t, "pgx", pg.ReplicaDSN(i, ""))
		var port int
		var inRecovery bool
		if err := replica.QueryRow("SELECT inet_server_port(), pg_is_in_recovery()").Scan(&port, &inRecovery); err != nil {
			t.Fatal(err)
		}
		if port != pg.ReplicaPort(i) || !inRecovery {
			t.Fatalf("replica %d: port %d in recovery %v; want port %d in recovery", i, port, inRecovery, pg.ReplicaPort(i))
		}
	}
	primary := open(t, "pgx", pg.PrimaryDSN(""))
	var inRecovery bool
	if err := primary.QueryRow("SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || inRecovery {
		t.Fatalf("primary in recovery=%v err=%v", inRecovery, err)
	}
	var level string
	if err := primary.QueryRow("SHOW wal_level").Scan(&level); err != nil || level != "logical" {
		t.Fatalf("wal_level %q err=%v, want logical", level, err)
	}
}

func TestPostgresApplyDelay(t *testing.T) {
	pg := testcluster.PostgresFor(t)
	ctx := ctxT(t)
	name := pg.CreateDatabase(t)
	primary := open(t, "pgx", pg.PrimaryDSN(name))
	replica := open(t, "pgx", pg.ReplicaDSN(1, name))
	mustExec(t, primary, "CREATE TABLE kv (k int PRIMARY KEY, v text)")
	if err := pg.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pg.SetApplyDelay(ctx, 1, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.SetApplyDelay(context.Background(), 1, 0) })
	if got := readValue(t, replica, "SHOW recovery_min_apply_delay"); got != "2s" {
		t.Fatalf("recovery_min_apply_delay = %q after reload, want 2s", got)
	}
	mustExec(t, primary, "INSERT INTO kv VALUES (1, 'x')")
	var n int
	if err := replica.QueryRow("SELECT count(*) FROM kv").Scan(&n); err != nil || n != 0 {
		t.Fatalf("delayed replica sees %d rows right after the commit (err %v), want 0", n, err)
	}
	if err := pg.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := replica.QueryRow("SELECT count(*) FROM kv").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after catch-up: %d rows (err %v), want 1", n, err)
	}
}

func TestPostgresStopStartReplicaAndRestartPrimary(t *testing.T) {
	pg := testcluster.PostgresFor(t)
	ctx := ctxT(t)
	err := pg.StopReplica(ctx, 0)
	if errors.Is(err, testcluster.ErrUnsupported) {
		t.Skip("provider cannot stop servers")
	}
	if err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", pg.ReplicaPort(0)), time.Second); err == nil {
		c.Close()
		t.Fatal("stopped replica still accepts connections")
	}
	if err := pg.StartReplica(ctx, 0); err != nil {
		t.Fatal(err)
	}
	name := pg.CreateDatabase(t)
	if err := pg.RestartPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	primary := open(t, "pgx", pg.PrimaryDSN(name))
	mustExec(t, primary, "CREATE TABLE t (x int)")
	mustExec(t, primary, "INSERT INTO t VALUES (42)")
	if err := pg.WaitCaughtUp(ctx); err != nil {
		t.Fatalf("replicas did not follow the restarted primary: %v", err)
	}
	for i := 0; i < pg.Replicas(); i++ {
		if got := readValue(t, open(t, "pgx", pg.ReplicaDSN(i, name)), "SELECT x::text FROM t"); got != "42" {
			t.Fatalf("replica %d: %q", i, got)
		}
	}
}

func TestMariaDBStopApplyHidesWrite(t *testing.T) {
	m := testcluster.MariaDBFor(t)
	ctx := ctxT(t)
	name := m.CreateDatabase(t)
	primary := open(t, "mysql", m.PrimaryDSN(name))
	replica := open(t, "mysql", m.ReplicaDSN(name))
	mustExec(t, primary, "CREATE TABLE kv (k int PRIMARY KEY, v varchar(10))")
	mustExec(t, primary, "INSERT INTO kv VALUES (1, 'old')")
	if err := m.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readValue(t, replica, "SELECT v FROM kv"); got != "old" {
		t.Fatalf("replica: %q", got)
	}
	if err := m.StopApply(ctx); err != nil {
		t.Fatal(err)
	}
	mustExec(t, primary, "UPDATE kv SET v = 'new'")
	if got := readValue(t, replica, "SELECT v FROM kv"); got != "old" {
		t.Fatalf("replica with apply stopped: got %q, want old", got)
	}
	if err := m.StartApply(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readValue(t, replica, "SELECT v FROM kv"); got != "new" {
		t.Fatalf("replica after StartApply: got %q, want new", got)
	}
	var strict string
	if err := replica.QueryRow("SELECT @@gtid_strict_mode").Scan(&strict); err != nil || strict != "1" {
		t.Fatalf("gtid_strict_mode=%q err=%v", strict, err)
	}
}

// TestMariaDBRestartPrimary: after a primary restart on the same port the
// replica reconnects by itself and replays what was written before and
// after it.
func TestMariaDBRestartPrimary(t *testing.T) {
	m := testcluster.MariaDBFor(t)
	ctx := ctxT(t)
	name := m.CreateDatabase(t)
	primary := open(t, "mysql", m.PrimaryDSN(name))
	mustExec(t, primary, "CREATE TABLE kv (k int PRIMARY KEY, v varchar(10))")
	mustExec(t, primary, "INSERT INTO kv VALUES (1, 'before')")
	port := m.PrimaryPort()
	if err := m.RestartPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	if m.PrimaryPort() != port {
		t.Fatalf("port changed: %d -> %d", port, m.PrimaryPort())
	}
	mustExec(t, primary, "INSERT INTO kv VALUES (2, 'after')") // the pool reconnects
	if err := m.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	replica := open(t, "mysql", m.ReplicaDSN(name))
	if got := readValue(t, replica, "SELECT GROUP_CONCAT(v ORDER BY k) FROM kv"); got != "before,after" {
		t.Fatalf("replica after the restart: %q, want before,after", got)
	}
}

func TestRedisStopStartSamePort(t *testing.T) {
	r := testcluster.RedisFor(t)
	ctx := ctxT(t)
	addr := r.Addr()
	ping := func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return err
		}
		buf := make([]byte, 7)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		if string(buf[:n]) != "+PONG\r\n" {
			return errors.New("unexpected reply " + string(buf[:n]))
		}
		return nil
	}
	if err := ping(); err != nil {
		t.Fatal(err)
	}
	err := r.Stop(ctx)
	if errors.Is(err, testcluster.ErrUnsupported) {
		t.Skip("provider cannot stop servers")
	}
	if err != nil {
		t.Fatal(err)
	}
	if ping() == nil {
		t.Fatal("stopped Redis still answers")
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Addr() != addr {
		t.Fatalf("restarted on %s, want %s", r.Addr(), addr)
	}
	if err := ping(); err != nil {
		t.Fatalf("after Start: %v", err)
	}
}

// TestProviderIsTheOneAskedFor: FRESHREAD_DOCKER=1 runs the servers in
// containers and =0 as local processes, and they are: in a container the
// postmaster is the first process of the container's own PID namespace
// (/proc/1 is postgres), locally /proc/1 is this machine's init.
func TestProviderIsTheOneAskedFor(t *testing.T) {
	asked := os.Getenv(testcluster.EnvDocker)
	if asked != "0" && asked != "1" {
		t.Skipf("%s is neither 0 nor 1: the provider follows the engine", testcluster.EnvDocker)
	}
	p := testcluster.PostgresFor(t)
	got, err := testcluster.Provider(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"0": "local", "1": "containers"}[asked]
	if got != want {
		t.Fatalf("%s=%s: provider %q, want %q", testcluster.EnvDocker, asked, got, want)
	}
	var first string
	if err := open(t, "pgx", p.PrimaryDSN("")).QueryRowContext(ctxT(t), "SELECT pg_read_file('/proc/1/comm')").Scan(&first); err != nil {
		t.Fatal(err)
	}
	first = strings.TrimSpace(first)
	if inContainer := first == "postgres"; inContainer != (want == "containers") {
		t.Fatalf("%s=%s: the primary's /proc/1 is %q", testcluster.EnvDocker, asked, first)
	}
}
