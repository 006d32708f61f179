package plugin_test

// Benchmarks of the per-read hot path against real servers (a PostgreSQL
// primary with two streaming replicas and Redis, started by
// internal/harness/testcluster on first use). Run them with
//
//	go test -run '^$' -bench . -benchmem -count=6 ./plugin/
//
// BenchmarkRead runs a real primary-key lookup through each setup;
// BenchmarkRoute runs the same statement with gorm.Session{DryRun: true}:
// every callback runs (freshread's and dbresolver's routing included,
// Redis round trip included) but gorm:query does not send the statement
// (gorm.io/gorm@v1.31.2 callbacks/query.go: `if !db.DryRun`), so the
// difference to the plain-GORM DryRun is the routing cost of one read.
//
// Each setup is checked before and after its loop: the pool its routing
// chose answers SELECT inet_server_port() with a replica's port (the
// primary's for plain GORM). The Redis client counts the commands issued
// on behalf of the benchmark's reads (a marker in their context; the
// plugin's poller publishes replay positions through the same client
// without it) and reports them as redis-cmds/op.

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/plugin/dbresolver"

	"github.com/freshread/freshread/freshreadprom"
	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/internal/lib/tracerec"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// benchRows is the number of bench_items rows: most benchmarks read row
// 1; BenchmarkReadSaturation reads and writes them all.
const benchRows = 64

// benchItem is the row the benchmarks read by primary key.
type benchItem struct {
	ID      uint `gorm:"primaryKey"`
	Name    string
	Version int
}

func (benchItem) TableName() string { return "bench_items" }

// benchDB is the database shared by every benchmark of the binary.
var benchDB struct {
	once sync.Once
	pg   *testcluster.Postgres
	name string
	err  error
}

func benchDatabase(b *testing.B) (*testcluster.Postgres, string) {
	b.Helper()
	pg := testcluster.PostgresFor(b)
	benchDB.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		benchDB.pg = pg
		benchDB.name, benchDB.err = pg.NewDatabase(ctx)
		if benchDB.err != nil {
			return
		}
		db, err := gorm.Open(postgres.Open(pg.PrimaryDSN(benchDB.name)), benchGormConfig())
		if err != nil {
			benchDB.err = err
			return
		}
		defer closeGorm(db)
		if err := db.AutoMigrate(&benchItem{}); err != nil {
			benchDB.err = err
			return
		}
		rows := make([]benchItem, benchRows)
		for i := range rows {
			rows[i] = benchItem{ID: uint(i + 1), Name: fmt.Sprint(i + 1), Version: 1}
		}
		if err := db.Create(&rows).Error; err != nil {
			benchDB.err = err
			return
		}
		benchDB.err = pg.WaitCaughtUp(ctx)
	})
	if benchDB.err != nil {
		b.Fatal(benchDB.err)
	}
	return benchDB.pg, benchDB.name
}

func benchGormConfig() *gorm.Config { return &gorm.Config{Logger: logger.Discard} }

func closeGorm(db *gorm.DB) {
	if s, err := db.DB(); err == nil {
		s.Close()
	}
}

// readMark marks the context of the benchmark's reads, so the Redis hook
// counts only their commands.
type readMark struct{}

// cmdCounter is a go-redis hook counting commands (each one round trip)
// and pipelines (one round trip each) issued with a readMark context.
type cmdCounter struct {
	cmds, pipelines atomic.Int64
}

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(readMark{}) != nil {
			c.cmds.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(readMark{}) != nil {
			c.pipelines.Add(1)
		}
		return next(ctx, cmds)
	}
}

func (c *cmdCounter) roundTrips() int64 { return c.cmds.Load() + c.pipelines.Load() }

// benchSetup is one way of reading benchItem 1.
type benchSetup struct {
	db      *gorm.DB
	counter *cmdCounter // nil without Redis
	// wantReplica: the read must be served by a replica (else the primary).
	wantReplica bool
	plugin      *plugin.Plugin // nil without freshread
	redisAddr   string         // the store's Redis server; "" without one
}

// openSetup opens a *gorm.DB for kind and waits until its reads of
// bench_items go where they should.
func openSetup(b *testing.B, kind string) *benchSetup {
	b.Helper()
	pg, name := benchDatabase(b)
	db, err := gorm.Open(postgres.Open(pg.PrimaryDSN(name)), benchGormConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { closeGorm(db) })
	s := &benchSetup{db: db, wantReplica: kind != "primary"}

	var dialectors []gorm.Dialector
	var replicas []plugin.Replica
	// Every pool keeps enough idle connections for the parallel
	// benchmark (database/sql keeps 2 by default): the replicas' pools are
	// opened here and handed over through the dialector, for dbresolver
	// and freshread alike.
	benchPool(b, db)
	for i := 0; i < pg.Replicas(); i++ {
		dsn := viaRelay(b, pg.ReplicaDSN(i, name))
		dialectors = append(dialectors, postgres.New(postgres.Config{Conn: openBenchPool(b, dsn)}))
		replicas = append(replicas, plugin.Replica{Name: fmt.Sprintf("r%d", i), Dialector: postgres.New(postgres.Config{Conn: openBenchPool(b, dsn)})})
	}
	cfg := plugin.Config{Replicas: replicas}
	switch kind {
	case "primary":
		return s
	case "dbresolver":
		if err := db.Use(dbresolver.Register(dbresolver.Config{Replicas: dialectors})); err != nil {
			b.Fatal(err)
		}
		return s
	case "freshread-memory", "freshread-memory-nostall":
		cfg.Store = lsnstore.NewMemory()
		if kind == "freshread-memory-nostall" {
			// The stall watch's share of a read's cost: without it a
			// read's context stays one that cannot end.
			cfg.StallTimeout = -1
		}
	case "freshread-redis", "freshread-redis-table", "freshread-redis-sequential", "freshread-redis-follower":
		cfg.TablePositions = kind == "freshread-redis-table"
		cfg.SequentialLookup = kind == "freshread-redis-sequential"
		r := testcluster.RedisFor(b)
		rdb := redis.NewClient(&redis.Options{Addr: viaRelay(b, r.Addr()), ContextTimeoutEnabled: true})
		b.Cleanup(func() { rdb.Close() })
		s.counter = &cmdCounter{}
		s.redisAddr = r.Addr()
		rdb.AddHook(s.counter)
		database := fmt.Sprintf("%s_%d", name, time.Now().UnixNano())
		cfg.Store = lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: database})
		if kind == "freshread-redis-follower" {
			// Another process holds the poller's lease first: this one
			// follows it, its reads carrying the holder's snapshot.
			startHolder(b, pg, name, replicaDSNs(b, pg, name), r.Addr(), database)
		}
	default:
		b.Fatalf("unknown setup %q", kind)
	}
	p := plugin.New(cfg)
	if err := db.Use(p); err != nil {
		b.Fatal(err)
	}
	s.plugin = p
	b.Cleanup(func() { p.Close() })

	// A write through the plugin publishes a real position for
	// bench_items, so every read compares the replicas against it (with
	// the Redis store, MGET finds a value to parse).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := db.WithContext(ctx).Model(&benchItem{ID: 1}).Update("version", gorm.Expr("version + 1")).Error; err != nil {
		b.Fatal(err)
	}
	if err := pg.WaitCaughtUp(ctx); err != nil {
		b.Fatal(err)
	}
	// The poller (every 20ms) must see the replicas past the write.
	deadline := time.Now().Add(10 * time.Second)
	for !s.routesToReplica(b, db.Session(&gorm.Session{DryRun: true})) {
		if time.Now().After(deadline) {
			b.Fatal("reads of bench_items still go to the primary 10s after the replicas caught up")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if kind == "freshread-redis-follower" && pollerLeading(b, p) {
		b.Fatal("the benchmark's process holds the poller's lease: it follows no one")
	}
	return s
}

// pollerLeading reports whether p holds the poller's lease (its metric).
func pollerLeading(b *testing.B, p *plugin.Plugin) bool {
	b.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(freshreadprom.Plugin(p)); err != nil {
		b.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "freshread_poller_leading" && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue() == 1
		}
	}
	return false
}

// benchRTT, from FRESHREAD_BENCH_RTT (a Go duration, e.g. 200us), puts a
// relay that delays every answer by it in front of the replicas and
// Redis: the round trips of servers on other hosts, which on this
// machine's loopback are CPU time rather than waiting. Zero (unset): the
// servers directly.
var benchRTT = func() time.Duration {
	d, _ := time.ParseDuration(os.Getenv("FRESHREAD_BENCH_RTT"))
	return d
}()

// viaRelay returns addr (a host:port, or a URL whose host it replaces)
// behind a relay delaying answers by benchRTT, or addr itself.
func viaRelay(b *testing.B, addr string) string {
	b.Helper()
	if benchRTT <= 0 {
		return addr
	}
	u, err := url.Parse(addr)
	isURL := err == nil && u.Host != ""
	target := addr
	if isURL {
		target = u.Host
	}
	rl, err := testcluster.NewRelay(target)
	if err != nil {
		b.Fatal(err)
	}
	rl.SetDelay(benchRTT)
	b.Cleanup(func() { rl.Close() })
	hostPort := fmt.Sprintf("127.0.0.1:%d", rl.Port())
	if !isURL {
		return hostPort
	}
	u.Host = hostPort
	return u.String()
}

// benchIdleConns is the idle connections every benchmark pool keeps.
const benchIdleConns = 64

func benchPool(b *testing.B, db *gorm.DB) {
	b.Helper()
	sqlDB, err := db.DB()
	if err != nil {
		b.Fatal(err)
	}
	sqlDB.SetMaxIdleConns(benchIdleConns)
}

func openBenchPool(b *testing.B, dsn string) *sql.DB {
	b.Helper()
	sqlDB, err := sql.Open("pgx", dsn)
	if err != nil {
		b.Fatal(err)
	}
	sqlDB.SetMaxIdleConns(benchIdleConns)
	b.Cleanup(func() { sqlDB.Close() })
	return sqlDB
}

// servedPort asks the pool routing chose for a read which server it is.
func servedPort(b *testing.B, pool gorm.ConnPool) int {
	b.Helper()
	var port int
	rows, err := pool.QueryContext(context.Background(), "SELECT inet_server_port()")
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	if !rows.Next() {
		b.Fatal("SELECT inet_server_port(): no row")
	}
	if err := rows.Scan(&port); err != nil {
		b.Fatal(err)
	}
	return port
}

// routesToReplica runs one read of benchItem 1 on db and reports whether
// the pool its routing chose is a replica's.
func (s *benchSetup) routesToReplica(b *testing.B, db *gorm.DB) bool {
	b.Helper()
	var it benchItem
	tx := db.Model(&benchItem{}).Where("id = ?", 1).Take(&it)
	if tx.Error != nil {
		b.Fatal(tx.Error)
	}
	if !tx.DryRun && it.ID != 1 {
		b.Fatalf("read returned %+v", it)
	}
	pool := tx.Statement.ConnPool
	if pool == nil {
		b.Fatal("no pool chosen")
	}
	port := servedPort(b, pool)
	return port != benchDB.pg.PrimaryPort()
}

func (s *benchSetup) check(b *testing.B, db *gorm.DB, when string) {
	b.Helper()
	if got := s.routesToReplica(b, db); got != s.wantReplica {
		b.Fatalf("%s: read served by a replica = %v, want %v", when, got, s.wantReplica)
	}
}

// benchKinds: freshread-memory and freshread-redis are the default Config
// (positions by key) with each store; freshread-redis-table keeps positions
// by table only (Config.TablePositions); freshread-redis-follower is
// freshread-redis in a process that follows another's poll (its reads
// carry the holder's snapshot).
var benchKinds = []string{"primary", "dbresolver", "freshread-memory", "freshread-redis", "freshread-redis-table", "freshread-redis-sequential", "freshread-redis-follower"}

// replicaDSNs are the replicas' DSNs of database name.
func replicaDSNs(b *testing.B, pg *testcluster.Postgres, name string) []string {
	var out []string
	for i := 0; i < pg.Replicas(); i++ {
		out = append(out, viaRelay(b, pg.ReplicaDSN(i, name)))
	}
	return out
}

// startHolder opens a plugin of its own on database name, sharing the
// Redis store database with the benchmark's, and waits until it holds the
// poller's lease (its snapshot is in the store).
func startHolder(b *testing.B, pg *testcluster.Postgres, name string, replicas []string, redisAddr, database string) {
	b.Helper()
	db, err := gorm.Open(postgres.Open(pg.PrimaryDSN(name)), benchGormConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { closeGorm(db) })
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { rdb.Close() })
	var rs []plugin.Replica
	for i, dsn := range replicas {
		rs = append(rs, plugin.Replica{Name: fmt.Sprintf("r%d", i), Dialector: postgres.Open(dsn)})
	}
	store := lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: database})
	// Reads keep the holder awake: resting, it would give the lease up.
	p := plugin.New(plugin.Config{Replicas: rs, Store: store, IdleAfter: time.Hour})
	if err := db.Use(p); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if snap, _, err := store.SharedPoll(ctx); err == nil && snap != nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatal("the holder published no snapshot within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// benchReads runs the primary-key lookup on db (a real read, or a DryRun
// session) in the benchmark loop.
func benchReads(b *testing.B, dryRun bool) { benchReadsIn(b, dryRun, benchKinds, context.Background()) }

// benchReadsIn is benchReads for kinds, with reads in a context derived
// from parent.
func benchReadsIn(b *testing.B, dryRun bool, kinds []string, parent context.Context) {
	for _, kind := range kinds {
		b.Run("setup="+kind, func(b *testing.B) {
			s, db := readSetup(b, kind, parent, dryRun)
			timedReads(b, s, db)
			s.check(b, db, "after the loop")
		})
	}
}

// readSetup opens setup kind for reads in a context derived from parent
// (DryRun: routing alone) and checks that a read goes where the setup
// sends it.
func readSetup(b *testing.B, kind string, parent context.Context, dryRun bool) (*benchSetup, *gorm.DB) {
	s := openSetup(b, kind)
	ctx := context.WithValue(parent, readMark{}, true)
	db := s.db.Session(&gorm.Session{Context: ctx, DryRun: dryRun})
	s.check(b, db, "before the loop")
	return s, db
}

// timedReads is the benchmark loop of one goroutine reading benchItem 1
// on db, reporting Redis commands per read and, for real reads, each
// read's median and p99.
func timedReads(b *testing.B, s *benchSetup, db *gorm.DB) {
	var before int64
	if s.counter != nil {
		before = s.counter.roundTrips()
	}
	// Each read's latency, for the median and p99 (a preallocated
	// slice: recording allocates nothing in the loop).
	lat := make([]time.Duration, 0, 1<<20)
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		var it benchItem
		if err := db.Model(&benchItem{}).Where("id = ?", 1).Take(&it).Error; err != nil {
			b.Fatal(err)
		}
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(start))
		}
	}
	if s.counter != nil {
		b.ReportMetric(float64(s.counter.roundTrips()-before)/float64(b.N), "redis-cmds/op")
	}
	if !db.DryRun && len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
	}
}

// BenchmarkReadParallel is BenchmarkRead from 32 goroutines at once
// (b.RunParallel): throughput under concurrency.
func BenchmarkReadParallel(b *testing.B) {
	for _, kind := range benchKinds {
		b.Run("setup="+kind, func(b *testing.B) {
			s, db := readSetup(b, kind, context.Background(), false)
			parallelReads(b, s, db)
			s.check(b, db, "after the loop")
		})
	}
}

// BenchmarkReadParallelRequestContext is BenchmarkReadParallel in a
// context that can end, as a service's request context: database/sql and
// the driver watch it for every read whatever the setup, so the stall
// watch's own context adds less than in one that cannot end.
func BenchmarkReadParallelRequestContext(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, kind := range []string{"dbresolver", "freshread-memory", "freshread-memory-nostall", "freshread-redis"} {
		b.Run("setup="+kind, func(b *testing.B) {
			s, db := readSetup(b, kind, ctx, false)
			parallelReads(b, s, db)
			s.check(b, db, "after the loop")
		})
	}
}

// parallelReads is the benchmark loop of 32 goroutines reading benchItem 1
// on db, their pools warmed up first, reporting Redis commands per read.
func parallelReads(b *testing.B, s *benchSetup, db *gorm.DB) {
	read := func() error {
		var it benchItem
		return db.Model(&benchItem{}).Where("id = ?", 1).Take(&it).Error
	}
	// Warm the pools up: 32 connections per server opened before the
	// clock starts.
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Go(func() {
			for i := 0; i < 20; i++ {
				if err := read(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var before int64
	if s.counter != nil {
		before = s.counter.roundTrips()
	}
	b.ResetTimer()
	b.ReportAllocs()
	b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := read(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	if s.counter != nil {
		b.ReportMetric(float64(s.counter.roundTrips()-before)/float64(b.N), "redis-cmds/op")
	}
}

// BenchmarkRead is a primary-key read served by the primary (plain GORM)
// or by a replica (dbresolver, freshread with each store).
func BenchmarkRead(b *testing.B) { benchReads(b, false) }

// BenchmarkReadRequestContext is BenchmarkRead in a context that can end,
// as a service's request context: database/sql and the driver then watch
// it for every read, with or without the plugin.
func BenchmarkReadRequestContext(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, kind := range []string{"dbresolver", "freshread-memory", "freshread-redis"} {
		b.Run("setup="+kind, func(b *testing.B) {
			s, db := readSetup(b, kind, ctx, false)
			timedReads(b, s, db)
			s.check(b, db, "after the loop")
		})
	}
}

// BenchmarkRoute is the same read with DryRun: the callbacks, routing
// included, without the statement's execution.
func BenchmarkRoute(b *testing.B) { benchReads(b, true) }

// BenchmarkRouteTraced is BenchmarkRoute for freshread's setups with the
// reads' context carrying a recording span (internal/lib/tracerec's
// in-memory tracer, which like the SDK's keeps a span's latest 128
// events): the cost of recording each decision as a span event, to compare
// with BenchmarkRoute (no span). An SDK's own cost per event differs.
func BenchmarkRouteTraced(b *testing.B) {
	tp := tracerec.NewProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("bench").Start(context.Background(), "reads")
	defer span.End()
	if !span.IsRecording() {
		b.Fatal("the reads' span does not record: the benchmark would measure the untraced path")
	}
	// benchReadsIn checks, before and after the loop, that the reads go
	// to a replica (s.check).
	benchReadsIn(b, true, []string{"freshread-memory", "freshread-redis"}, ctx)
}
