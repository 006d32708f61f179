package testcluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PgBouncer is one PgBouncer process in front of each server of a
// Postgres cluster (the primary and every replica), as a deployment puts
// one next to each database host: a client reaches server i only through
// bouncer i. Each listens on 127.0.0.1 (a port of freePort) and forwards
// every database name to its server (a "*" entry), so the per-test
// databases of CreateDatabase need no configuration. Authentication is
// trust with a userlist naming the cluster's user, as the test servers
// trust every local connection. The bouncers are the local pgbouncer
// binary (Debian's package; scripts/install-deps installs it), also when
// the servers are containers (FRESHREAD_DOCKER=1): the test process's
// machine reaches the containers, and so does a local bouncer. (The test
// image has no pgbouncer: adding it rebuilds the image, which took longer
// than the harness's start timeout here.)
type PgBouncer struct {
	mode  string
	base  string
	user  osUser
	nodes []*pgbNode // nodes[0] is the primary's
}

type pgbNode struct {
	name   string
	port   int
	target *url.URL // the server's URL (user, password, host, port)
	srv    server
}

// Pool modes of PgBouncer (pool_mode).
const (
	PoolTransaction = "transaction"
	PoolSession     = "session"
)

// pgbouncerBin finds the pgbouncer binary (Debian installs it in /usr/sbin).
func pgbouncerBin() (string, error) {
	bin, err := lookPath("pgbouncer", "/usr/sbin", "/usr/local/sbin", "/usr/bin")
	if err != nil {
		return "", unavailable("PgBouncer", "pgbouncer not found (PATH, /usr/sbin); install it (Debian: apt-get install -y pgbouncer, or scripts/install-deps)")
	}
	return bin, nil
}

// StartPgBouncer starts one PgBouncer in pool mode mode (PoolTransaction
// or PoolSession) in front of each server of pg. Close stops them.
func StartPgBouncer(ctx context.Context, pg *Postgres, mode string) (_ *PgBouncer, err error) {
	if mode != PoolTransaction && mode != PoolSession {
		return nil, fmt.Errorf("testcluster: pool mode %q: want %q or %q", mode, PoolTransaction, PoolSession)
	}
	bin, err := pgbouncerBin()
	if err != nil {
		return nil, err
	}
	// PgBouncer refuses to run as root: as PostgreSQL, it runs as postgres.
	u, err := serverUser("postgres")
	if err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp("", "freshread-pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	b := &PgBouncer{mode: mode, base: base, user: u}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	if err := u.mkdir(base, 0o755); err != nil {
		return nil, err
	}
	targets := []string{pg.PrimaryDSN("")}
	for i := range pg.Replicas() {
		targets = append(targets, pg.ReplicaDSN(i, ""))
	}
	for i, t := range targets {
		tu, err := url.Parse(t)
		if err != nil {
			return nil, fmt.Errorf("testcluster: server URL: %w", err)
		}
		name := "primary"
		if i > 0 {
			name = fmt.Sprintf("replica%d", i-1)
		}
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		nd := &pgbNode{name: name, port: port, target: tu}
		nd.srv.stopSignal = syscall.SIGINT // PgBouncer: SIGINT is a safe shutdown, SIGTERM immediate
		b.nodes = append(b.nodes, nd)
		if err := b.start(ctx, bin, nd); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// PgBouncerFor starts PgBouncer in front of pg for t, stopped when t ends;
// it skips t when the binary is missing (fails it when
// FRESHREAD_REQUIRE_INTEGRATION=1), as PostgresFor does for a server.
func PgBouncerFor(t testing.TB, pg *Postgres, mode string) *PgBouncer {
	t.Helper()
	ctx, cancel := startTimeout()
	defer cancel()
	b, err := StartPgBouncer(ctx, pg, mode)
	need(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

// pgbConf is one bouncer's configuration: every database of the server,
// pool mode mode, a pool per (database, user) large enough for the tests'
// parallel clients, no Unix socket (the bouncers share a directory); the
// log goes to stderr, which start writes to <name>.log.
const pgbConf = `[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
pool_mode = %s
max_client_conn = 1000
default_pool_size = 20
server_lifetime = 3600
server_idle_timeout = 60
ignore_startup_parameters = extra_float_digits,options
log_connections = 0
log_disconnections = 0
`

func (b *PgBouncer) start(ctx context.Context, bin string, nd *pgbNode) error {
	user := nd.target.User.Username()
	if user == "" {
		user = "postgres"
	}
	pass, _ := nd.target.User.Password()
	// The userlist's password is the one PgBouncer logs in to the
	// server with (trust: the client gives none).
	userlist := filepath.Join(b.base, nd.name+".users")
	if err := os.WriteFile(userlist, []byte(fmt.Sprintf("%q %q\n", user, pass)), 0o600); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	b.user.chown(userlist)
	logPath := b.logPath(nd)
	conf := filepath.Join(b.base, nd.name+".ini")
	text := fmt.Sprintf(pgbConf, nd.target.Hostname(), nd.target.Port(), nd.port, userlist, user, b.mode)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	b.user.chown(conf)
	cmd, err := b.user.command(nil, logPath, bin, conf)
	if err != nil {
		return err
	}
	if err := nd.srv.start(cmd); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := waitPort(ctx, &nd.srv, nd.port); err != nil {
		out, _ := os.ReadFile(logPath)
		return fmt.Errorf("testcluster: pgbouncer %s: %w: %s", nd.name, err, lastLines(out, 10))
	}
	return nil
}

// PrimaryLog is the last n lines of the primary's bouncer's log, for a
// failing test's message.
func (b *PgBouncer) PrimaryLog(n int) string {
	out, err := os.ReadFile(b.logPath(b.nodes[0]))
	if err != nil {
		return fmt.Sprintf("testcluster: pgbouncer log: %v", err)
	}
	return lastLines(out, n)
}

// logPath is where start writes bouncer nd's log.
func (b *PgBouncer) logPath(nd *pgbNode) string { return filepath.Join(b.base, nd.name+".log") }

// Mode is the pool mode, PoolTransaction or PoolSession.
func (b *PgBouncer) Mode() string { return b.mode }

// url is the server's URL for database db with the bouncer's address.
func (b *PgBouncer) url(nd *pgbNode, db string) string {
	u := *nd.target
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(nd.port))
	u.Path = "/" + orPostgres(db)
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return u.String()
}

// PrimaryDSN is a URL of database db ("" means postgres) on the primary
// through its bouncer. pgx opened with it uses its default query exec
// mode (cache_statement); add default_query_exec_mode (WithExecMode) for
// transaction pooling.
func (b *PgBouncer) PrimaryDSN(db string) string { return b.url(b.nodes[0], db) }

// ReplicaDSN is PrimaryDSN for replica i.
func (b *PgBouncer) ReplicaDSN(i int, db string) string { return b.url(b.nodes[i+1], db) }

// PrimaryPort is the port of the primary's bouncer.
func (b *PgBouncer) PrimaryPort() int { return b.nodes[0].port }

// ReplicaPort is the port of replica i's bouncer.
func (b *PgBouncer) ReplicaPort(i int) int { return b.nodes[i+1].port }

// WithExecMode returns dsn with pgx's default_query_exec_mode set to mode
// (simple_protocol, exec, cache_describe, describe_exec, cache_statement);
// "" returns dsn as it is (pgx's default).
func WithExecMode(dsn, mode string) string {
	if mode == "" {
		return dsn
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "default_query_exec_mode=" + url.QueryEscape(mode)
}

// Close stops the bouncers and removes their files.
func (b *PgBouncer) Close() error {
	for _, nd := range b.nodes {
		nd.srv.stop(10 * time.Second)
	}
	return os.RemoveAll(b.base)
}
