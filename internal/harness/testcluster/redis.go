package testcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Redis is a standalone Redis server without persistence.
type Redis struct {
	backend redisBackend
}

// redisBackend is what a provider (environment, local binary, container)
// implements for Redis.
type redisBackend interface {
	addr() string
	stop(ctx context.Context) error
	start(ctx context.Context) error
	close() error
}

// Addr is the server's host:port.
func (r *Redis) Addr() string { return r.backend.addr() }

// Stop stops the server, keeping its port, for outage tests.
// It returns ErrUnsupported for a server given by environment variables.
func (r *Redis) Stop(ctx context.Context) error { return r.backend.stop(ctx) }

// Start starts a stopped server again on the same port.
func (r *Redis) Start(ctx context.Context) error { return r.backend.start(ctx) }

// Close stops the server for good and removes its files.
func (r *Redis) Close() error { return r.backend.close() }

// NewRedis starts a Redis server of its own (not the shared one) whose
// command line ends with args, which it keeps across Stop and Start (for
// example "--maxmemory", "1gb"): a container when a Docker engine is
// reachable, else a local redis-server. The caller closes it.
func NewRedis(ctx context.Context, args ...string) (*Redis, error) {
	return startRedisWith(ctx, args)
}

// RedisWithArgsFor is NewRedis for t: closed when t ends; skipped (failed
// when FRESHREAD_REQUIRE_INTEGRATION=1) when no server can be started.
func RedisWithArgsFor(t testing.TB, args ...string) *Redis {
	t.Helper()
	ctx, cancel := startTimeout()
	defer cancel()
	r, err := startRedisWith(ctx, args)
	need(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

// startRedis picks a provider: FRESHREAD_REDIS_ADDR, then a container when a
// Docker engine is reachable, then a local redis-server.
func startRedis(ctx context.Context) (*Redis, error) {
	if addr := os.Getenv(EnvRedisAddr); addr != "" {
		return &Redis{backend: envRedis(addr)}, nil
	}
	return startRedisWith(ctx, nil)
}

func startRedisWith(ctx context.Context, args []string) (*Redis, error) {
	containers, err := useDocker(ctx)
	if err != nil {
		return nil, err
	}
	if containers {
		b, err := startDockerRedis(ctx, args)
		if err != nil {
			return nil, err
		}
		return &Redis{backend: b}, nil
	}
	b, err := startLocalRedis(ctx, args)
	if err != nil {
		return nil, err
	}
	return &Redis{backend: b}, nil
}

type envRedis string

func (e envRedis) addr() string                { return string(e) }
func (e envRedis) stop(context.Context) error  { return ErrUnsupported }
func (e envRedis) start(context.Context) error { return ErrUnsupported }
func (e envRedis) close() error                { return nil }

type localRedis struct {
	bin  string
	dir  string
	port int
	args []string // appended to the command line
	srv  server
}

func startLocalRedis(ctx context.Context, args []string) (*localRedis, error) {
	if os.Getenv(EnvNoLocal) == "1" {
		return nil, unavailable("Redis", EnvNoLocal+"=1 disables local servers; unset it, or set the FRESHREAD_* server variables of docs/testing.md")
	}
	bin, err := lookPath("redis-server", "/usr/bin", "/usr/local/bin")
	if err != nil {
		return nil, unavailable("Redis", "redis-server not found; install it (Debian: apt-get install -y redis-server) or set "+EnvRedisAddr)
	}
	dir, err := os.MkdirTemp("", "freshread-redis-")
	if err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	r := &localRedis{bin: bin, dir: dir, port: port, args: args}
	if err := r.start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return r, nil
}

func (r *localRedis) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

func (r *localRedis) start(ctx context.Context) error {
	u := osUser{asSelf: true}
	args := append([]string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", r.dir, "--daemonize", "no", "--protected-mode", "no"}, r.args...)
	cmd, err := u.command(nil, filepath.Join(r.dir, "redis.log"), r.bin, args...)
	if err != nil {
		return err
	}
	if err := r.srv.start(cmd); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := waitPort(ctx, &r.srv, r.port); err != nil {
		r.srv.stop(time.Second)
		return fmt.Errorf("%w (log: %s)", err, filepath.Join(r.dir, "redis.log"))
	}
	return nil
}

func (r *localRedis) stop(context.Context) error {
	r.srv.stop(5 * time.Second)
	return nil
}

func (r *localRedis) close() error {
	r.srv.stop(5 * time.Second)
	return os.RemoveAll(r.dir)
}
