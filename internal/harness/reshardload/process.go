package reshardload

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/freshreadprom"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/sharding"
)

// EnvWorker names the environment variable that makes a binary run as a
// worker process (WorkerMain): it holds the ProcessConfig as JSON.
const EnvWorker = "FRESHREAD_RESHARD_WORKER"

// ShardDSNs is one shard: its primary and replicas.
type ShardDSNs struct {
	Name     string   `json:"name"`
	Primary  string   `json:"primary"`
	Replicas []string `json:"replicas,omitempty"`
}

// ProcessConfig is everything a worker process needs to build its own
// sharded *gorm.DB, as a service process would.
type ProcessConfig struct {
	// Engine is the engine of the default and shard databases:
	// EnginePostgres (also when empty) or EngineMariaDB. The map is in
	// PostgreSQL either way.
	Engine     string        `json:"engine,omitempty"`
	Default    string        `json:"default"` // the default database
	MapDSN     string        `json:"map_dsn"` // where the shared map is stored
	Redis      string        `json:"redis"`   // host:port of the position store shared by every process
	Shards     []ShardDSNs   `json:"shards"`
	Buckets    int           `json:"buckets"`
	Initial    []string      `json:"initial"` // shards of the initial EvenBuckets map
	Worker     int           `json:"worker"`  // ID generator worker number
	Users      []int64       `json:"users"`
	Seed       uint64        `json:"seed"`
	MapRefresh time.Duration `json:"map_refresh"`
	MapLease   time.Duration `json:"map_lease"`
	Pause      time.Duration `json:"pause"`
	Goroutines int           `json:"goroutines"` // workers in the process, users split between them
	LagRead    time.Duration `json:"lag_read"`   // see WorkerConfig.LagRead
}

func quiet() *gorm.Config { return &gorm.Config{Logger: logger.Discard} }

// Open builds the process's sharded *gorm.DB from c; close returns it.
func Open(ctx context.Context, c ProcessConfig) (*gorm.DB, *sharding.Sharding, func(), error) {
	if err := checkEngine(c.Engine); err != nil {
		return nil, nil, nil, err
	}
	mapDB, err := sql.Open("pgx", c.MapDSN)
	if err != nil {
		return nil, nil, nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: c.Redis})
	ids, err := sharding.NewIDGenerator(ctx, sharding.IDConfig{Worker: c.Worker})
	if err != nil {
		mapDB.Close()
		rdb.Close()
		return nil, nil, nil, err
	}
	cfg := sharding.Config{
		Tables: []sharding.Table{
			{Name: "orders", Key: "user_id", ID: "id"},
			{Name: "order_items", Key: "user_id"},
		},
		Algorithm:  sharding.EvenBuckets(c.Buckets, c.Initial...),
		IDs:        ids,
		Map:        sharding.NewSQLMapStore(mapDB),
		MapRefresh: c.MapRefresh,
		MapLease:   c.MapLease,
		ClientID:   fmt.Sprintf("reshardload-%d-%d", os.Getpid(), c.Worker),
	}
	for _, sh := range c.Shards {
		sc := sharding.ShardConfig{Name: sh.Name, Dialector: dialector(c.Engine, sh.Primary),
			Freshness: ShardFreshness(rdb, sh.Name)}
		for i, r := range sh.Replicas {
			sc.Replicas = append(sc.Replicas, plugin.Replica{Name: fmt.Sprintf("r%d", i), Dialector: dialector(c.Engine, r)})
		}
		cfg.Shards = append(cfg.Shards, sc)
	}
	db, err := gorm.Open(dialector(c.Engine, c.Default), quiet())
	if err != nil {
		ids.Close()
		mapDB.Close()
		rdb.Close()
		return nil, nil, nil, err
	}
	s := sharding.New(cfg)
	if err := db.Use(s); err != nil {
		ids.Close()
		mapDB.Close()
		rdb.Close()
		return nil, nil, nil, err
	}
	closeAll := func() {
		s.Close()
		if d, err := db.DB(); err == nil {
			d.Close()
		}
		ids.Close()
		mapDB.Close()
		rdb.Close()
	}
	return db, s, closeAll, nil
}

// ShardFreshness is the freshread configuration of shard name's plugin in
// every process (and in the mover, which records the copied rows' writes
// in the same store): positions in the shared Redis, one namespace per
// shard.
func ShardFreshness(rdb redis.UniversalClient, name string) plugin.Config {
	return plugin.Config{
		PollInterval: 5 * time.Millisecond,
		Store:        lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: "reshardload-" + name, Timeout: time.Second}),
	}
}

// RunProcess runs c.Goroutines workers (default 2) over c.Users until ctx
// is done and returns their results.
func RunProcess(ctx context.Context, c ProcessConfig) ([]Result, error) {
	db, s, closeAll, err := Open(ctx, c)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	n := c.Goroutines
	if n <= 0 {
		n = 2
	}
	results := make([]Result, n)
	done := make(chan int)
	for g := 0; g < n; g++ {
		var users []int64
		for i := g; i < len(c.Users); i += n {
			users = append(users, c.Users[i])
		}
		go func(g int, users []int64) {
			results[g] = Run(ctx, WorkerConfig{DB: db, S: s, Users: users, Seed: c.Seed + uint64(g), Pause: c.Pause, LagRead: c.LagRead})
			done <- g
		}(g, users)
	}
	for range n {
		<-done
	}
	results[0].Metrics = gatherMetrics(s)
	return results, nil
}

// WorkerMain runs the worker process described by $FRESHREAD_RESHARD_WORKER
// until its standard input closes, then writes its results as JSON to
// standard output. It returns false when the variable is not set (the
// binary is not a worker).
func WorkerMain() bool {
	raw := os.Getenv(EnvWorker)
	if raw == "" {
		return false
	}
	var c ProcessConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fmt.Fprintln(os.Stderr, "reshardload worker:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, bufio.NewReader(os.Stdin))
		cancel()
	}()
	results, err := RunProcess(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reshardload worker:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(results); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

// Process is a running worker process.
type Process struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *os.File
	stderr *tailBuffer // the end of what the process wrote to stderr
}

// stderrKept is how much of a worker's standard error Stop keeps for its
// error: enough for a race detector report (which a worker prints before
// exiting with status 66) to reach the test's failure message whole.
const stderrKept = 64 << 10

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// StartProcess starts cmd (a binary that calls WorkerMain first thing,
// e.g. the test binary or the demo re-executed) as a worker for c.
func StartProcess(cmd *exec.Cmd, c ProcessConfig) (*Process, error) {
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	out, err := os.CreateTemp("", "reshardload-*.json")
	if err != nil {
		return nil, err
	}
	cmd.Env = append(os.Environ(), EnvWorker+"="+string(raw))
	cmd.Stdout = out
	tail := &tailBuffer{max: stderrKept}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	cmd.Stderr = io.MultiWriter(cmd.Stderr, tail)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		out.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, err
	}
	return &Process{cmd: cmd, stdin: stdin, out: out, stderr: tail}, nil
}

// Stop tells the process to stop and returns its results.
func (p *Process) Stop() ([]Result, error) {
	p.stdin.Close()
	werr := p.cmd.Wait()
	defer os.Remove(p.out.Name())
	defer p.out.Close()
	if werr != nil {
		return nil, fmt.Errorf("reshardload: worker process: %w; its standard error ends with:\n%s", werr, p.stderr)
	}
	if _, err := p.out.Seek(0, 0); err != nil {
		return nil, err
	}
	var results []Result
	if err := json.NewDecoder(p.out).Decode(&results); err != nil {
		return nil, fmt.Errorf("reshardload: worker output: %w", err)
	}
	if len(results) == 0 {
		return nil, errors.New("reshardload: worker process returned no result")
	}
	return results, nil
}

// gatherMetrics reads the sharding plugin's map counters (the guard's
// refusals and their retries, stale-map refusals, the map version).
func gatherMetrics(s *sharding.Sharding) map[string]float64 {
	reg := prometheus.NewRegistry()
	if err := reg.Register(freshreadprom.Sharding(s)); err != nil {
		return nil
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				out[mf.GetName()] += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[mf.GetName()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}
