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
// stop in Run after every test has finished.
var shared struct {
	mu       sync.Mutex
	spec     Spec
	pg       *Postgres
	pgErr    error
	maria    *MariaDB
	mariaErr error
	redis    *Redis
	redisErr error
	closers  []func() error
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

// Shutdown stops every shared server. Run calls it; the demo and the bench
// command call it themselves.
func Shutdown() {
	shared.mu.Lock()
	closers := shared.closers
	shared.closers = nil
	shared.pg, shared.maria, shared.redis = nil, nil, nil
	shared.pgErr, shared.mariaErr, shared.redisErr = nil, nil, nil
	shared.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		_ = closers[i]()
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
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.pg == nil && shared.pgErr == nil {
		ctx, cancel := startTimeout()
		defer cancel()
		n := shared.spec.PostgresReplicas
		if n <= 0 {
			n = 2
		}
		shared.pg, shared.pgErr = StartPostgres(ctx, n)
		if shared.pg != nil {
			shared.closers = append(shared.closers, shared.pg.Close)
		}
	}
	return shared.pg, shared.pgErr
}

// SharedMariaDB returns the package's MariaDB primary and replica.
func SharedMariaDB() (*MariaDB, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.maria == nil && shared.mariaErr == nil {
		ctx, cancel := startTimeout()
		defer cancel()
		shared.maria, shared.mariaErr = StartMariaDB(ctx)
		if shared.maria != nil {
			shared.closers = append(shared.closers, shared.maria.Close)
		}
	}
	return shared.maria, shared.mariaErr
}

// SharedRedis returns the package's Redis server.
func SharedRedis() (*Redis, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.redis == nil && shared.redisErr == nil {
		ctx, cancel := startTimeout()
		defer cancel()
		shared.redis, shared.redisErr = startRedis(ctx)
		if shared.redis != nil {
			shared.closers = append(shared.closers, shared.redis.Close)
		}
	}
	return shared.redis, shared.redisErr
}

// PostgresFor returns the shared PostgreSQL cluster, or skips t (fails it
// when FRESHREAD_REQUIRE_INTEGRATION=1) with a one-line reason.
func PostgresFor(t testing.TB) *Postgres {
	t.Helper()
	pg, err := SharedPostgres()
	need(t, err)
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
