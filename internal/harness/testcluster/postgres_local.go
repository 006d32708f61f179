package testcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// localPostgres runs the PostgreSQL binaries installed on this machine.
type localPostgres struct {
	bindir string
	user   osUser
	base   string
	nodes  []*pgNode // nodes[0] is the primary
}

type pgNode struct {
	name string
	dir  string
	port int
	srv  server
}

// pgBinDir finds the directory holding initdb and postgres: pg_config
// --bindir, then the newest /usr/lib/postgresql/*/bin (Debian), then PATH.
func pgBinDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", unavailable("PostgreSQL", "initdb not found (pg_config --bindir, /usr/lib/postgresql/*/bin, PATH); install it (Debian: apt-get install -y postgresql) or set "+EnvPostgresPrimary+" and "+EnvPostgresReplicas)
}

func pgMajor(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// pgConf is appended to the primary's postgresql.conf; the replicas inherit
// it through pg_basebackup. Durability is off: these are throwaway servers.
const pgConf = `
listen_addresses = '127.0.0.1'
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
hot_standby = on
hot_standby_feedback = on
wal_receiver_status_interval = 1s
fsync = off
synchronous_commit = on
full_page_writes = off
shared_buffers = 32MB
max_connections = 500
max_prepared_transactions = 64
wal_keep_size = 256MB
log_min_messages = warning
logging_collector = off
`

func startLocalPostgres(ctx context.Context, n int, settings []string) (_ *localPostgres, err error) {
	if os.Getenv(EnvNoLocal) == "1" {
		return nil, unavailable("PostgreSQL", EnvNoLocal+"=1 disables local servers; unset it, or set the FRESHREAD_* server variables of docs/testing.md")
	}
	bindir, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	u, err := serverUser("postgres")
	if err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp("", "freshread-pg-")
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	p := &localPostgres{bindir: bindir, user: u, base: base}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if err := u.mkdir(base, 0o755); err != nil {
		return nil, err
	}
	primary, err := p.newNode("primary")
	if err != nil {
		return nil, err
	}
	if err := u.run(ctx, filepath.Join(bindir, "initdb"), "-D", primary.dir, "-U", "postgres",
		"--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, err
	}
	conf := pgConf
	for _, s := range settings {
		conf += s + "\n" // the last line of a name wins
	}
	if err := appendFile(filepath.Join(primary.dir, "postgresql.conf"), conf); err != nil {
		return nil, err
	}
	hba := "local all all trust\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n"
	if err := os.WriteFile(filepath.Join(primary.dir, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	u.chown(filepath.Join(primary.dir, "pg_hba.conf"))
	if err := p.startNode(ctx, primary); err != nil {
		return nil, err
	}
	// Replicas: one base backup each, taken concurrently.
	replicas := make([]*pgNode, n)
	for i := range replicas {
		if replicas[i], err = p.newNode(fmt.Sprintf("replica%d", i)); err != nil {
			return nil, err
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, r := range replicas {
		wg.Add(1)
		go func(i int, r *pgNode) {
			defer wg.Done()
			if errs[i] = u.run(ctx, filepath.Join(bindir, "pg_basebackup"), "-h", "127.0.0.1",
				"-p", strconv.Itoa(primary.port), "-U", "postgres", "-D", r.dir, "-R", "-X", "stream",
				"--checkpoint=fast", "--no-sync"); errs[i] != nil {
				return
			}
			// application_name identifies the replica in pg_stat_replication.
			conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", primary.port, r.name)
			if errs[i] = appendFile(filepath.Join(r.dir, "postgresql.auto.conf"),
				fmt.Sprintf("primary_conninfo = '%s'\n", conninfo)); errs[i] != nil {
				return
			}
			errs[i] = p.startNode(ctx, r)
		}(i, r)
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return nil, e
		}
	}
	return p, nil
}

func (p *localPostgres) newNode(name string) (*pgNode, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	nd := &pgNode{name: name, dir: filepath.Join(p.base, name), port: port}
	nd.srv.stopSignal = syscall.SIGINT // fast shutdown
	if err := p.user.mkdir(nd.dir, 0o700); err != nil {
		return nil, err
	}
	p.nodes = append(p.nodes, nd)
	return nd, nil
}

// startNode starts the postgres binary for nd and waits until it accepts
// queries (a standby accepts them once it reaches a consistent state).
func (p *localPostgres) startNode(ctx context.Context, nd *pgNode) error {
	logPath := filepath.Join(p.base, nd.name+".log")
	cmd, err := p.user.command(nil, logPath, filepath.Join(p.bindir, "postgres"),
		"-D", nd.dir, "-p", strconv.Itoa(nd.port), "-k", p.base)
	if err != nil {
		return err
	}
	if err := nd.srv.start(cmd); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		// pg_isready exits 0 once connections are accepted.
		if exec.CommandContext(ctx, filepath.Join(p.bindir, "pg_isready"), "-q", "-h", "127.0.0.1",
			"-p", strconv.Itoa(nd.port), "-U", "postgres", "-d", "postgres").Run() == nil {
			return nil
		}
		if nd.srv.exited() {
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("testcluster: postgres %s exited during start: %s", nd.name, lastLines(out, 10))
		}
		select {
		case <-ctx.Done():
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("testcluster: postgres %s not ready: %w: %s", nd.name, ctx.Err(), lastLines(out, 10))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (p *localPostgres) url(nd *pgNode, db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", nd.port, db)
}

func (p *localPostgres) primaryURL(db string) string        { return p.url(p.nodes[0], db) }
func (p *localPostgres) replicaURL(i int, db string) string { return p.url(p.nodes[i+1], db) }
func (p *localPostgres) replicas() int                      { return len(p.nodes) - 1 }

func (p *localPostgres) stopReplica(_ context.Context, i int) error {
	p.nodes[i+1].srv.stop(30 * time.Second)
	return nil
}

func (p *localPostgres) startReplica(ctx context.Context, i int) error {
	return p.startNode(ctx, p.nodes[i+1])
}

func (p *localPostgres) restartPrimary(ctx context.Context) error {
	p.nodes[0].srv.stop(30 * time.Second)
	return p.startNode(ctx, p.nodes[0])
}

func (p *localPostgres) close() error {
	// Replicas first, so they do not spin reconnecting to a dead primary.
	for i := len(p.nodes) - 1; i >= 0; i-- {
		p.nodes[i].srv.stop(10 * time.Second)
	}
	return os.RemoveAll(p.base)
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return fmt.Errorf("testcluster: %w", err)
	}
	return f.Close()
}
