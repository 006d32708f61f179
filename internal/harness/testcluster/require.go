package testcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// Spec says how many servers a test package needs.
type Spec struct {
	// PostgresReplicas is the number of streaming replicas. Default 2.
	PostgresReplicas int
}

// shared holds the servers of one test binary; they start on first use and
// stop in Run after every test has finished. Each group has its own lock,
// so that groups start at the same time when asked from several
// goroutines (the engine's fixed cost of a container start then overlaps:
// Prestart).
var shared struct {
	mu      sync.Mutex // guards spec and closers
	spec    Spec
	closers []func() error
	pg      sharedGroup[*Postgres]
	maria   sharedGroup[*MariaDB]
	redis   sharedGroup[*Redis]
}

// sharedGroup is one shared server group, started once.
type sharedGroup[T interface{ Close() error }] struct {
	mu      sync.Mutex
	started bool
	v       T
	err     error
}

// get returns the group, starting it with start on first use.
func (g *sharedGroup[T]) get(start func(context.Context) (T, error)) (T, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.started {
		g.started = true
		ctx, cancel := startTimeout()
		defer cancel()
		g.v, g.err = start(ctx)
		if g.err == nil {
			shared.mu.Lock()
			shared.closers = append(shared.closers, g.v.Close)
			shared.mu.Unlock()
		}
	}
	return g.v, g.err
}

// reset forgets the group (Shutdown closes it).
func (g *sharedGroup[T]) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	var zero T
	g.started, g.v, g.err = false, zero, nil
}

// Run is called from a test package's TestMain. It runs the tests, then
// stops every server the tests started, and returns the exit code:
//
//	func TestMain(m *testing.M) { os.Exit(testcluster.Run(m, testcluster.Spec{})) }
//
// Servers also die with the test binary when a test panics (see startCmd).
func Run(m *testing.M, spec Spec) int {
	shared.mu.Lock()
	shared.spec = spec
	shared.mu.Unlock()
	code := m.Run()
	Shutdown()
	return code
}

// Shutdown stops every shared server, the groups at once. Run calls it;
// the demo and the bench command call it themselves.
func Shutdown() {
	shared.pg.reset()
	shared.maria.reset()
	shared.redis.reset()
	shared.mu.Lock()
	closers := shared.closers
	shared.closers = nil
	shared.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range closers {
		wg.Go(func() { _ = c() })
	}
	wg.Wait()
}

// Prestart starts the shared groups named (each of "postgres", "mariadb",
// "redis") in the background, so that a program needing several overlaps
// their starts; the Shared functions then wait for them. An unknown name
// is ignored.
func Prestart(groups ...string) {
	for _, g := range groups {
		switch g {
		case "postgres":
			go SharedPostgres()
		case "mariadb":
			go SharedMariaDB()
		case "redis":
			go SharedRedis()
		}
	}
}

// startTimeout bounds the start of a server group: long, because a loaded
// machine starts servers slowly and a group's start is progress the
// engine or the servers make; it is reached only when one is stuck.
func startTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*time.Minute)
}

// SharedPostgres returns the package's PostgreSQL cluster, starting it on
// first use.
func SharedPostgres() (*Postgres, error) {
	return shared.pg.get(func(ctx context.Context) (*Postgres, error) {
		shared.mu.Lock()
		n := shared.spec.PostgresReplicas
		shared.mu.Unlock()
		if n <= 0 {
			n = 2
		}
		return StartPostgres(ctx, n)
	})
}

// SharedMariaDB returns the package's MariaDB primary and replica.
func SharedMariaDB() (*MariaDB, error) { return shared.maria.get(StartMariaDB) }

// SharedRedis returns the package's Redis server.
func SharedRedis() (*Redis, error) { return shared.redis.get(startRedis) }

// PostgresFor returns the shared PostgreSQL cluster, or skips t (fails it
// when FRESHREAD_REQUIRE_INTEGRATION=1) with a one-line reason.
func PostgresFor(t testing.TB) *Postgres {
	t.Helper()
	pg, err := SharedPostgres()
	need(t, err)
	return pg
}

// PostgresWithFor starts a PostgreSQL primary with n replicas of the
// test's own, with server settings (StartPostgresWith), stopped when the
// test ends; a missing server is a skip or, with
// FRESHREAD_REQUIRE_INTEGRATION=1, a failure.
func PostgresWithFor(t testing.TB, n int, settings ...string) *Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pg, err := StartPostgresWith(ctx, n, settings...)
	need(t, err)
	t.Cleanup(func() { _ = pg.Close() })
	return pg
}

// MariaDBFor is PostgresFor for MariaDB.
func MariaDBFor(t testing.TB) *MariaDB {
	t.Helper()
	m, err := SharedMariaDB()
	need(t, err)
	return m
}

// RedisFor is PostgresFor for Redis.
func RedisFor(t testing.TB) *Redis {
	t.Helper()
	r, err := SharedRedis()
	need(t, err)
	return r
}

func need(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if Required() {
		t.Fatalf("%v (%s=1: a missing server is a failure)", err, EnvRequire)
	}
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("integration test skipped: %v", err)
	}
	t.Fatalf("%v", err)
}

// Required reports whether FRESHREAD_REQUIRE_INTEGRATION=1.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// uniqueName returns a database name unique in this process.
var nameSeq struct {
	sync.Mutex
	n int
}

func uniqueName(prefix string) string {
	nameSeq.Lock()
	defer nameSeq.Unlock()
	nameSeq.n++
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), nameSeq.n)
}
