package testcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// localMariaDB runs the mariadbd binary installed on this machine.
type localMariaDB struct {
	bin     string
	user    osUser
	base    string
	primary *mariaNode
	replica *mariaNode
}

type mariaNode struct {
	name     string
	dir      string
	port     int
	serverID int
	srv      server
}

func startLocalMariaDB(ctx context.Context) (_ *localMariaDB, err error) {
	if os.Getenv(EnvNoLocal) == "1" {
		return nil, unavailable("MariaDB", EnvNoLocal+"=1 disables local servers; unset it, or set the FRESHREAD_* server variables of docs/testing.md")
	}
	bin, err := lookPath("mariadbd", "/usr/sbin", "/usr/local/sbin")
	if err != nil {
		return nil, unavailable("MariaDB", "mariadbd not found; install it (Debian: apt-get install -y mariadb-server) or set "+EnvMariaDBPrimary+" and "+EnvMariaDBReplica)
	}
	installer, err := lookPath("mariadb-install-db", "/usr/bin", "/usr/local/bin")
	if err != nil {
		return nil, unavailable("MariaDB", "mariadb-install-db not found; install mariadb-server")
	}
	u, err := serverUser("mysql")
	if err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp("", "freshread-maria-")
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	m := &localMariaDB{bin: bin, user: u, base: base}
	defer func() {
		if err != nil {
			m.close()
		}
	}()
	if err := u.mkdir(base, 0o755); err != nil {
		return nil, err
	}
	if m.primary, err = m.newNode("primary", 1); err != nil {
		return nil, err
	}
	if m.replica, err = m.newNode("replica", 2); err != nil {
		return nil, err
	}
	// Install the system tables once and copy them: bootstrap does not write
	// the binlog, so both servers start from the same empty GTID state.
	args := []string{"--no-defaults", "--datadir=" + m.primary.dir, "--auth-root-authentication-method=normal", "--skip-test-db"}
	if !u.asSelf {
		args = append(args, "--user="+u.name)
	}
	if err := installMariaDB(ctx, installer, args, m.primary.dir); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", m.primary.dir+"/.", m.replica.dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("testcluster: copy datadir: %w: %s", err, out)
	}
	errs := make(chan error, 2)
	for _, nd := range []*mariaNode{m.primary, m.replica} {
		go func(nd *mariaNode) { errs <- m.startNode(ctx, nd) }(nd)
	}
	for range 2 {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return nil, err
	}
	// Root may only log in from localhost; the tests connect over TCP from
	// 127.0.0.1, so give root that host too (bootstrapping, not replicated:
	// run on both with the binlog off).
	grant := []string{
		"SET sql_log_bin = 0",
		"CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'",
		"GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
	}
	for _, nd := range []*mariaNode{m.primary, m.replica} {
		if err := execMySQL(ctx, m.socketDSN(nd), grant...); err != nil {
			return nil, err
		}
	}
	if err := execMySQL(ctx, m.replicaDSN(""),
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1", m.primary.port),
		"START SLAVE"); err != nil {
		return nil, err
	}
	return m, nil
}

// tmpDir is the node's directory for temporary files, under base.
func (nd *mariaNode) tmpDir(base string) string { return filepath.Join(base, nd.name+"-tmp") }

func (m *localMariaDB) newNode(name string, id int) (*mariaNode, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	nd := &mariaNode{name: name, dir: filepath.Join(m.base, name), port: port, serverID: id}
	for _, d := range []string{nd.dir, nd.tmpDir(m.base)} {
		if err := m.user.mkdir(d, 0o750); err != nil {
			return nil, err
		}
	}
	return nd, nil
}

func (m *localMariaDB) startNode(ctx context.Context, nd *mariaNode) error {
	logPath := filepath.Join(m.base, nd.name+".log")
	args := []string{"--no-defaults",
		"--datadir=" + nd.dir,
		"--port=" + strconv.Itoa(nd.port),
		"--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(m.base, nd.name+".sock"),
		// Temporary tables (an information_schema read makes them) in a
		// directory of the server's own, not the machine's /tmp: a
		// catalog read once failed there with "Error on delete of
		// '/tmp/#sql-temptable-…'" while other servers and programs ran.
		"--tmpdir=" + nd.tmpDir(m.base),
		"--pid-file=" + filepath.Join(m.base, nd.name+".pid"),
		"--log-error=" + logPath,
	}
	args = append(args, mariaReplicationArgs(nd.serverID)...)
	cmd, err := m.user.command(nil, filepath.Join(m.base, nd.name+".out"), m.bin, args...)
	if err != nil {
		return err
	}
	if err := nd.srv.start(cmd); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := waitPort(ctx, &nd.srv, nd.port); err != nil {
		out, _ := os.ReadFile(logPath)
		return fmt.Errorf("%w: %s", err, lastLines(out, 10))
	}
	// The server listens on TCP before it creates its socket, which the
	// first statements (as root@localhost) use. The socket's file appears
	// when it is bound, a moment before it listens (a connection then is
	// refused: seen on a loaded machine), so wait for it to accept one.
	sock := filepath.Join(m.base, nd.name+".sock")
	var d net.Dialer
	for {
		if c, err := d.DialContext(ctx, "unix", sock); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("testcluster: mariadb %s: no socket %s: %w: %s", nd.name, sock, ctx.Err(), lastLines(out, 10))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (m *localMariaDB) socketDSN(nd *mariaNode) string {
	c := mysql.NewConfig()
	c.User = "root"
	c.Net = "unix"
	c.Addr = filepath.Join(m.base, nd.name+".sock")
	return c.FormatDSN()
}

func (m *localMariaDB) dsn(nd *mariaNode, db string) string {
	c := mysql.NewConfig()
	c.User = "root"
	c.Net = "tcp"
	c.Addr = "127.0.0.1:" + strconv.Itoa(nd.port)
	c.DBName = db
	c.ParseTime = true
	return c.FormatDSN()
}

func (m *localMariaDB) primaryDSN(db string) string { return m.dsn(m.primary, db) }
func (m *localMariaDB) replicaDSN(db string) string { return m.dsn(m.replica, db) }

func (m *localMariaDB) restartPrimary(ctx context.Context) error {
	m.primary.srv.stop(30 * time.Second)
	return m.startNode(ctx, m.primary)
}

func (m *localMariaDB) close() error {
	for _, nd := range []*mariaNode{m.replica, m.primary} {
		if nd == nil {
			continue
		}
		// A server that ended by itself crashed: its log (the statement
		// and stack a crash prints) goes with the data directory, so say
		// it first.
		if nd.srv.crashed() {
			out, _ := os.ReadFile(filepath.Join(m.base, nd.name+".log"))
			fmt.Fprintf(os.Stderr, "testcluster: mariadb %s ended by itself (crashed); the end of its log:\n%s\n", nd.name, lastLines(out, 60))
		}
		nd.srv.stop(20 * time.Second)
	}
	return os.RemoveAll(m.base)
}

// installMariaDB runs mariadb-install-db into dir, once more into an
// emptied dir if the first run fails (its bootstrap server has failed
// once in a loaded CI run and passed when run again). The error names the
// installer's own error lines, which its closing advice would otherwise
// push out of the last lines.
func installMariaDB(ctx context.Context, installer string, args []string, dir string) error {
	var err error
	for attempt := 1; attempt <= 2; attempt++ {
		var out []byte
		if out, err = exec.CommandContext(ctx, installer, args...).CombinedOutput(); err == nil {
			return nil
		}
		err = fmt.Errorf("testcluster: mariadb-install-db (attempt %d of 2): %w: %s%s", attempt, err, errorLines(out), lastLines(out, 10))
		entries, rerr := os.ReadDir(dir)
		if rerr != nil {
			return err
		}
		for _, e := range entries {
			if rerr := os.RemoveAll(filepath.Join(dir, e.Name())); rerr != nil {
				return err
			}
		}
	}
	return err
}

// errorLines returns the lines of out that report an error, each ending
// in a newline.
func errorLines(out []byte) string {
	var b strings.Builder
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "ERROR") || strings.Contains(strings.ToLower(line), "error:") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
