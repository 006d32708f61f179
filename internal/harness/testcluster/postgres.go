package testcluster

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for the controls
)

// Postgres is a PostgreSQL primary with streaming replicas. The controls
// that only need SQL (pause, delay, wait) work with every provider; the ones
// that need the process (stop, start, restart) return ErrUnsupported when
// the servers were given by environment variables.
type Postgres struct {
	backend pgBackend
}

// pgBackend is what a provider implements for PostgreSQL.
type pgBackend interface {
	// primaryURL and replicaURL return superuser URLs for database db.
	primaryURL(db string) string
	replicaURL(i int, db string) string
	replicas() int
	stopReplica(ctx context.Context, i int) error
	startReplica(ctx context.Context, i int) error
	restartPrimary(ctx context.Context) error
	close() error
}

// StartPostgres starts (or connects to) a primary with n streaming replicas.
// Providers are tried in order: FRESHREAD_PG_PRIMARY_URL and
// FRESHREAD_PG_REPLICA_URLS; a container when a Docker engine is reachable;
// the local PostgreSQL binaries.
func StartPostgres(ctx context.Context, n int) (*Postgres, error) {
	return StartPostgresWith(ctx, n)
}

// StartPostgresWith is StartPostgres with server settings ("name=value",
// e.g. "max_prepared_transactions=0") that override the harness's own,
// on a container or local binaries; servers given by URL
// (FRESHREAD_PG_PRIMARY_URL) cannot take them, and settings with them
// are an error.
func StartPostgresWith(ctx context.Context, n int, settings ...string) (*Postgres, error) {
	var (
		b   pgBackend
		err error
	)
	switch {
	case os.Getenv(EnvPostgresPrimary) != "":
		if len(settings) > 0 {
			return nil, unavailable("PostgreSQL with settings "+strings.Join(settings, ", "), "servers given by "+EnvPostgresPrimary+" keep their own settings; unset it to start servers here")
		}
		b, err = newEnvPostgres()
	default:
		var containers bool
		if containers, err = useDocker(ctx); containers {
			b, err = startDockerPostgres(ctx, n, settings)
		} else if err == nil {
			b, err = startLocalPostgres(ctx, n, settings)
		}
	}
	if err != nil {
		return nil, err
	}
	p := &Postgres{backend: b}
	if err := p.WaitCaughtUp(ctx); err != nil {
		b.close()
		return nil, err
	}
	return p, nil
}

// Replicas is the number of replicas.
func (p *Postgres) Replicas() int { return p.backend.replicas() }

// PrimaryDSN is a superuser URL of database db on the primary ("" means postgres).
func (p *Postgres) PrimaryDSN(db string) string { return p.backend.primaryURL(orPostgres(db)) }

// ReplicaDSN is a superuser URL of database db on replica i.
func (p *Postgres) ReplicaDSN(i int, db string) string {
	return p.backend.replicaURL(i, orPostgres(db))
}

// ReplicaPort is replica i's TCP port, which inet_server_port() reports.
func (p *Postgres) ReplicaPort(i int) int { return urlPort(p.backend.replicaURL(i, "postgres")) }

// Host is the address every server of the cluster is reached at:
// 127.0.0.1 for local servers, the network's gateway or the engine's
// address for containers.
func (p *Postgres) Host() string {
	u, err := url.Parse(p.backend.primaryURL("postgres"))
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// PrimaryPort is the primary's TCP port.
func (p *Postgres) PrimaryPort() int { return urlPort(p.backend.primaryURL("postgres")) }

func orPostgres(db string) string {
	if db == "" {
		return "postgres"
	}
	return db
}

func urlPort(u string) int {
	pu, err := url.Parse(u)
	if err != nil {
		return 0
	}
	var port int
	fmt.Sscanf(pu.Port(), "%d", &port)
	return port
}

// Close stops the servers and removes their data.
func (p *Postgres) Close() error { return p.backend.close() }

func (p *Postgres) exec(ctx context.Context, dsn string, query string, args ...any) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, query, args...); err != nil {
		return fmt.Errorf("testcluster: %s: %w", query, err)
	}
	return nil
}

func (p *Postgres) queryString(ctx context.Context, dsn, query string) (string, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return "", fmt.Errorf("testcluster: %w", err)
	}
	defer db.Close()
	var s sql.NullString
	if err := db.QueryRowContext(ctx, query).Scan(&s); err != nil {
		return "", fmt.Errorf("testcluster: %s: %w", query, err)
	}
	return s.String, nil
}

func (p *Postgres) checkReplica(i int) error {
	if i < 0 || i >= p.Replicas() {
		return fmt.Errorf("testcluster: no replica %d (have %d)", i, p.Replicas())
	}
	return nil
}

// PauseReplay pauses WAL replay on replica i (pg_wal_replay_pause) and
// waits until the pause has taken effect.
func (p *Postgres) PauseReplay(ctx context.Context, i int) error {
	if err := p.checkReplica(i); err != nil {
		return err
	}
	dsn := p.ReplicaDSN(i, "")
	if err := p.exec(ctx, dsn, "SELECT pg_wal_replay_pause()"); err != nil {
		return err
	}
	for {
		state, err := p.queryString(ctx, dsn, "SELECT pg_get_wal_replay_pause_state()")
		if err != nil {
			return err
		}
		if state == "paused" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: replica %d did not pause: %w", i, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// ResumeReplay resumes WAL replay on replica i.
func (p *Postgres) ResumeReplay(ctx context.Context, i int) error {
	if err := p.checkReplica(i); err != nil {
		return err
	}
	return p.exec(ctx, p.ReplicaDSN(i, ""), "SELECT pg_wal_replay_resume()")
}

// SetApplyDelay sets recovery_min_apply_delay on replica i (0 removes it)
// and reloads its configuration.
func (p *Postgres) SetApplyDelay(ctx context.Context, i int, d time.Duration) error {
	if err := p.checkReplica(i); err != nil {
		return err
	}
	dsn := p.ReplicaDSN(i, "")
	q := fmt.Sprintf("ALTER SYSTEM SET recovery_min_apply_delay = '%dms'", d.Milliseconds())
	if d == 0 {
		q = "ALTER SYSTEM RESET recovery_min_apply_delay"
	}
	if err := p.exec(ctx, dsn, q); err != nil {
		return err
	}
	return p.exec(ctx, dsn, "SELECT pg_reload_conf()")
}

// PrimaryFlushLSN is the primary's pg_current_wal_flush_lsn().
func (p *Postgres) PrimaryFlushLSN(ctx context.Context) (string, error) {
	return p.queryString(ctx, p.PrimaryDSN(""), "SELECT pg_current_wal_flush_lsn()::text")
}

// ReplayLSN is replica i's pg_last_wal_replay_lsn().
func (p *Postgres) ReplayLSN(ctx context.Context, i int) (string, error) {
	if err := p.checkReplica(i); err != nil {
		return "", err
	}
	return p.queryString(ctx, p.ReplicaDSN(i, ""), "SELECT pg_last_wal_replay_lsn()::text")
}

// WaitCaughtUp waits until every replica has replayed the primary's flush
// position as of the call. A paused replica never catches up: resume it
// first, or the call ends with ctx.
func (p *Postgres) WaitCaughtUp(ctx context.Context) error {
	target, err := p.PrimaryFlushLSN(ctx)
	if err != nil {
		return err
	}
	for i := 0; i < p.Replicas(); i++ {
		dsn := p.ReplicaDSN(i, "")
		for {
			var ok bool
			db, err := sql.Open("pgx", dsn)
			if err == nil {
				err = db.QueryRowContext(ctx, "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", target).Scan(&ok)
				db.Close()
			}
			if err == nil && ok {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("testcluster: replica %d did not reach %s (last error: %v): %w", i, target, err, ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	return nil
}

// StopReplica stops replica i (fast shutdown).
func (p *Postgres) StopReplica(ctx context.Context, i int) error {
	if err := p.checkReplica(i); err != nil {
		return err
	}
	return p.backend.stopReplica(ctx, i)
}

// StartReplica starts a stopped replica i on its old port.
func (p *Postgres) StartReplica(ctx context.Context, i int) error {
	if err := p.checkReplica(i); err != nil {
		return err
	}
	return p.backend.startReplica(ctx, i)
}

// RestartPrimary stops and starts the primary on the same port; replicas
// reconnect by themselves.
func (p *Postgres) RestartPrimary(ctx context.Context) error { return p.backend.restartPrimary(ctx) }

// CreateDatabase creates a fresh database on the primary, waits until every
// replica has it, and drops it when t ends. It returns the name.
func (p *Postgres) CreateDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name, err := p.NewDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = p.DropDatabase(ctx, name)
	})
	return name
}

// NewDatabase creates a fresh database on the primary and waits until every
// replica has it.
func (p *Postgres) NewDatabase(ctx context.Context) (string, error) {
	name := uniqueName("fr")
	if err := p.exec(ctx, p.PrimaryDSN(""), "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	if err := p.WaitCaughtUp(ctx); err != nil {
		return "", err
	}
	return name, nil
}

// DropDatabase drops a database made by NewDatabase.
func (p *Postgres) DropDatabase(ctx context.Context, name string) error {
	if !strings.HasPrefix(name, "fr_") {
		return fmt.Errorf("testcluster: refusing to drop %q, not made by NewDatabase", name)
	}
	return p.exec(ctx, p.PrimaryDSN(""), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
}

// envPostgres is the provider for servers given by environment variables.
type envPostgres struct {
	primary   *url.URL
	replicas_ []*url.URL
}

func newEnvPostgres() (*envPostgres, error) {
	e := &envPostgres{}
	var err error
	if e.primary, err = url.Parse(os.Getenv(EnvPostgresPrimary)); err != nil {
		return nil, fmt.Errorf("testcluster: %s is not a URL", EnvPostgresPrimary)
	}
	for _, s := range strings.Split(os.Getenv(EnvPostgresReplicas), ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("testcluster: %s holds an entry that is not a URL", EnvPostgresReplicas)
		}
		e.replicas_ = append(e.replicas_, u)
	}
	if len(e.replicas_) == 0 {
		return nil, fmt.Errorf("testcluster: %s is set but %s is empty", EnvPostgresPrimary, EnvPostgresReplicas)
	}
	return e, nil
}

func withDB(u *url.URL, db string) string {
	c := *u
	c.Path = "/" + db
	return c.String()
}

func (e *envPostgres) primaryURL(db string) string             { return withDB(e.primary, db) }
func (e *envPostgres) replicaURL(i int, db string) string      { return withDB(e.replicas_[i], db) }
func (e *envPostgres) replicas() int                           { return len(e.replicas_) }
func (e *envPostgres) stopReplica(context.Context, int) error  { return ErrUnsupported }
func (e *envPostgres) startReplica(context.Context, int) error { return ErrUnsupported }
func (e *envPostgres) restartPrimary(context.Context) error    { return ErrUnsupported }
func (e *envPostgres) close() error                            { return nil }
