package workload

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"
	"gorm.io/plugin/dbresolver"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// Strategy names a routing strategy.
type Strategy string

// The strategies, in the order Run runs them by default.
const (
	AlwaysPrimary     Strategy = "always-primary"
	DBResolver        Strategy = "dbresolver"
	Window            Strategy = "window-2s"
	FreshTable        Strategy = "freshread-table"
	FreshTableSession Strategy = "freshread-table+session"
	// FreshTableWait is FreshTable with Config.MaxWait: a read no replica
	// can serve yet waits (up to Options.MaxWait) for one to catch up.
	FreshTableWait Strategy = "freshread-table+wait"
	// FreshKey is the plugin's default Config (positions by key): a read
	// of a row waits only for writes of that row (and writes that proved
	// no row). The FreshTable strategies set Config.TablePositions.
	FreshKey Strategy = "freshread-key"
	// FreshKeyWait is FreshKey with Config.MaxWait.
	FreshKeyWait Strategy = "freshread-key+wait"
)

// AllStrategies lists every strategy.
var AllStrategies = []Strategy{AlwaysPrimary, DBResolver, Window, FreshTable, FreshTableSession, FreshTableWait, FreshKey, FreshKeyWait}

// Options configures Run. Zero fields take their defaults.
type Options struct {
	// Duration of the workload per strategy. Default 20s.
	Duration time.Duration
	// Users, each owning one row per table. Default 200.
	Users int
	// Workers run operations concurrently. Default 8.
	Workers int
	// Tables written and read. Default 4.
	Tables int
	// ReadFraction is the share of operations that read. Default 0.9.
	ReadFraction float64
	// OwnReads is the share of reads of the reading user's own row (the
	// rest read a random user's row). Default 0.5; negative means 0.
	OwnReads float64
	// Rate is the number of operations started per second over all
	// workers; 0 runs them back to back. Default 0.
	Rate float64
	// Engine is "postgres" (default) or "mariadb".
	Engine string
	// Delay is the replicas' apply delay: recovery_min_apply_delay on both
	// PostgreSQL replicas, testcluster.MariaDB.SetApplyDelay (a delaying
	// relay in front of the primary, any delay) on the MariaDB replica.
	// Default 50ms on PostgreSQL, 1s on MariaDB; negative means none.
	Delay time.Duration
	// Window is the primary window of the window strategy. Default 2s.
	Window time.Duration
	// MaxWait is the plugin's MaxWait for the freshread-table+wait
	// strategy. Default: twice the apply delay, at least 100ms (with no
	// delay a replica is still up to a poll interval, 20ms, plus the apply
	// time behind; 100ms covers that with room on a loaded machine).
	MaxWait time.Duration
	// StoreFault is what happens to the Redis store, for the plugin
	// strategies, from the end of the warm-up to the end of the run,
	// through a relay between the plugin and Redis: "" nothing, "slow"
	// every answer 200ms late, "stalled" nothing answers and nothing
	// breaks (as a Redis stopped with SIGSTOP, or a network dropping
	// packets), "refused" every connection reset and refused.
	StoreFault string
	// Pooler is what sits between the workload (and the plugin) and the
	// PostgreSQL servers: "" nothing, PgBouncer (transaction mode) or
	// PgBouncerSession (pooler.go).
	Pooler string
	// Strategies to run, in order. Default AllStrategies.
	Strategies []Strategy
	// Seed of the random choices (each strategy restarts from it).
	// Default 1.
	Seed uint64
	// Progress, when set, receives a line per phase and per strategy.
	Progress io.Writer
}

// minMaxWait is the smallest default MaxWait.
const minMaxWait = 100 * time.Millisecond

// WithDefaults returns o with its zero fields set to their defaults, as
// Run uses it (for printing; do not pass the result to Run again: a
// negative OwnReads or Delay becomes 0 and would then take its default).
func (o Options) WithDefaults() Options { return o.withDefaults() }

func (o Options) withDefaults() Options {
	if o.Duration <= 0 {
		o.Duration = 20 * time.Second
	}
	if o.Users <= 0 {
		o.Users = 200
	}
	if o.Workers <= 0 {
		o.Workers = 8
	}
	if o.Tables <= 0 {
		o.Tables = 4
	}
	if o.ReadFraction <= 0 || o.ReadFraction > 1 {
		o.ReadFraction = 0.9
	}
	if o.OwnReads == 0 {
		o.OwnReads = 0.5
	} else if o.OwnReads < 0 {
		o.OwnReads = 0
	}
	if o.Engine == "" {
		o.Engine = Postgres
	}
	if o.Delay == 0 {
		o.Delay = 50 * time.Millisecond
		if o.Engine == MariaDB {
			o.Delay = time.Second
		}
	} else if o.Delay < 0 {
		o.Delay = 0
	}
	if o.MaxWait <= 0 {
		o.MaxWait = max(2*o.Delay, minMaxWait)
	}
	if o.Window <= 0 {
		o.Window = 2 * time.Second
	}
	if len(o.Strategies) == 0 {
		o.Strategies = AllStrategies
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return o
}

// Result is what one strategy measured.
type Result struct {
	Strategy Strategy
	// Elapsed is the wall time of the workload (Duration plus the
	// operations in flight at its end).
	Elapsed time.Duration
	Reads   int64
	Writes  int64
	// Errors counts failed operations (not in Reads or Writes).
	Errors int64
	// ReplicaReads were answered by a replica (inet_server_port() or
	// @@port).
	ReplicaReads int64
	// StaleReads returned a version below the highest one acknowledged
	// before the read started.
	StaleReads int64
	// ReadP50 and ReadP99 are read latencies (time of the GORM call);
	// WriteP50 and WriteP99, those of the writes that succeeded.
	ReadP50, ReadP99   time.Duration
	WriteP50, WriteP99 time.Duration
	// WritesRefused counts writes the plugin refused before they
	// committed (plugin.ErrStoreUnreachable; also in Errors).
	WritesRefused int64
	// UsesRedis: the strategy has a Redis store; then StoreReadCmds counts
	// the Redis commands (each one round trip; pipelines count one)
	// issued on behalf of reads, and StoreAllCmds every command of the
	// client (reads, writes' publications, the replay poller).
	UsesRedis     bool
	StoreReadCmds int64
	StoreAllCmds  int64
	// Reasons counts the plugin's routing decisions of reads by reason
	// (plugin strategies only).
	Reasons map[plugin.Reason]int64
}

// ReplicaShare is ReplicaReads/Reads.
func (r Result) ReplicaShare() float64 { return ratio(r.ReplicaReads, r.Reads) }

// StoreRoundTripsPerRead is StoreReadCmds/Reads.
func (r Result) StoreRoundTripsPerRead() float64 { return ratio(r.StoreReadCmds, r.Reads) }

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Run starts (or reuses) the process's shared testcluster servers of
// Options.Engine and Redis, sets the apply delay on the replicas, and runs
// the workload once per strategy, each on a fresh database. It leaves the
// servers running; the caller stops them with testcluster.Shutdown.
func Run(ctx context.Context, opts Options) ([]Result, error) {
	o := opts.withDefaults()
	start := time.Now()
	for _, s := range o.Strategies {
		if !slices.Contains(AllStrategies, s) {
			return nil, fmt.Errorf("workload: unknown strategy %q", s)
		}
	}
	cl, err := openCluster(o.Engine)
	if err != nil {
		return nil, err
	}
	cl, stopPooler, err := withPooler(ctx, cl, o.Pooler)
	if err != nil {
		return nil, err
	}
	defer stopPooler()
	rs, err := testcluster.SharedRedis()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Progress, "servers ready in %v: %s, redis %s\n",
		time.Since(start).Round(time.Millisecond), cl.describe(), rs.Addr())
	if err := cl.setApplyDelay(ctx, o.Delay); err != nil {
		return nil, err
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cl.setApplyDelay(c, 0)
	}()
	fmt.Fprintf(o.Progress, "%s apply delay %v on every replica; MaxWait of %s %v\n", o.Engine, o.Delay, FreshTableWait, o.MaxWait)

	var results []Result
	for _, s := range o.Strategies {
		r, err := runStrategy(ctx, cl, rs, o, s)
		if err != nil {
			return results, fmt.Errorf("workload: %s: %w", s, err)
		}
		fmt.Fprintf(o.Progress, "%-24s reads %d writes %d errors %d replica %.1f%% stale %d p50 %v p99 %v; writes p50 %v p99 %v, refused %d\n",
			s, r.Reads, r.Writes, r.Errors, 100*r.ReplicaShare(), r.StaleReads, r.ReadP50, r.ReadP99, r.WriteP50, r.WriteP99, r.WritesRefused)
		if len(r.Reasons) > 0 {
			fmt.Fprintf(o.Progress, "%-24s read decisions: %s\n", "", formatReasons(r.Reasons))
		}
		results = append(results, r)
	}
	return results, nil
}

func formatReasons(m map[plugin.Reason]int64) string {
	keys := make([]plugin.Reason, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

func tableName(i int) string { return fmt.Sprintf("rows_%d", i) }

// row is one user's row of a table.
type row struct {
	ID      int `gorm:"primaryKey"`
	Version int64
}

// readMark marks the contexts of reads, for the Redis hook and OnDecision.
type readMark struct{}

// counter is a go-redis hook counting commands: all of them, those issued
// with a read's context, and by name those among the latter that are not
// the read path's MGET (connection set-up: HELLO, CLIENT SETINFO).
type counter struct {
	read, all atomic.Int64
	mu        sync.Mutex
	other     map[string]int64
}

func (c *counter) countRead(name string) {
	c.read.Add(1)
	if name == "mget" {
		return
	}
	c.mu.Lock()
	if c.other == nil {
		c.other = map[string]int64{}
	}
	c.other[name]++
	c.mu.Unlock()
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.all.Add(1)
		if ctx.Value(readMark{}) != nil {
			c.countRead(cmd.Name())
		}
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.all.Add(1)
		if ctx.Value(readMark{}) != nil {
			c.countRead("pipeline")
		}
		return next(ctx, cmds)
	}
}

// env is one strategy's database and handles.
type env struct {
	o        Options
	cl       cluster
	strategy Strategy
	db       *gorm.DB
	primary  int // the primary's port

	// acked[t][id-1]: highest version acknowledged to a writer.
	acked [][]atomic.Int64
	// sessions[u]: u's plugin session (table+session).
	sessions []*plugin.SessionState

	redisCount *counter
	// storeRelay is between the plugin and Redis when Options.StoreFault
	// is set.
	storeRelay *testcluster.Relay
	reasonsMu  sync.Mutex
	reasons    map[plugin.Reason]int64
}

func runStrategy(ctx context.Context, cl cluster, rs *testcluster.Redis, o Options, s Strategy) (Result, error) {
	name, err := cl.newDatabase(ctx)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = cl.dropDatabase(c, name)
	}()
	if err := seed(ctx, cl, name, o); err != nil {
		return Result{}, err
	}
	e := &env{o: o, cl: cl, strategy: s, primary: cl.primaryPort()}
	e.acked = make([][]atomic.Int64, o.Tables)
	for t := range e.acked {
		e.acked[t] = make([]atomic.Int64, o.Users)
	}
	e.sessions = make([]*plugin.SessionState, o.Users)
	for u := range e.sessions {
		e.sessions[u] = &plugin.SessionState{}
	}

	closeAll, err := e.open(ctx, rs, name)
	if err != nil {
		return Result{}, err
	}
	defer closeAll()
	if err := e.warmUp(ctx); err != nil {
		return Result{}, err
	}
	return e.run(ctx)
}

// seed creates the tables with one row per user and waits until the
// replicas have them.
func seed(ctx context.Context, cl cluster, name string, o Options) error {
	db, err := sql.Open(cl.driver(), cl.primaryDSN(name))
	if err != nil {
		return err
	}
	defer db.Close()
	for t := 0; t < o.Tables; t++ {
		for _, q := range cl.seedSQL(tableName(t), o.Users) {
			if _, err := db.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("seed %s: %w", tableName(t), err)
			}
		}
	}
	return cl.waitCaughtUp(ctx)
}

// pool opens a database/sql pool sized for the workers.
func (e *env) pool(dsn string) (*sql.DB, error) {
	db, err := sql.Open(e.cl.driver(), dsn)
	if err != nil {
		return nil, err
	}
	n := 2 * e.o.Workers
	db.SetMaxIdleConns(n)
	db.SetMaxOpenConns(n)
	return db, nil
}

// open builds the strategy's *gorm.DB and returns a function closing it.
func (e *env) open(ctx context.Context, rs *testcluster.Redis, name string) (func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	fail := func(err error) (func(), error) {
		closeAll()
		return nil, err
	}
	primary, err := e.pool(e.cl.primaryDSN(name))
	if err != nil {
		return fail(err)
	}
	closers = append(closers, func() { primary.Close() })
	var replicas []*sql.DB
	for i := 0; i < e.cl.replicas(); i++ {
		r, err := e.pool(e.cl.replicaDSN(i, name))
		if err != nil {
			return fail(err)
		}
		// The plugin closes the replica pools it was given in Close; a
		// second Close is harmless.
		closers = append(closers, func() { r.Close() })
		replicas = append(replicas, r)
	}
	db, err := gorm.Open(e.cl.dialector(primary), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return fail(err)
	}
	e.db = db

	switch e.strategy {
	case AlwaysPrimary:
		return closeAll, nil
	case DBResolver:
		var ds []gorm.Dialector
		for _, r := range replicas {
			ds = append(ds, e.cl.dialector(r))
		}
		if err := db.Use(dbresolver.Register(dbresolver.Config{Replicas: ds})); err != nil {
			return fail(err)
		}
		return closeAll, nil
	}

	addr := rs.Addr()
	if e.o.StoreFault != "" {
		relay, err := testcluster.NewRelay(addr)
		if err != nil {
			return fail(err)
		}
		closers = append(closers, func() { relay.Close() })
		e.storeRelay = relay
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(relay.Port()))
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 2 * e.o.Workers})
	closers = append(closers, func() { rdb.Close() })
	e.redisCount = &counter{}
	rdb.AddHook(e.redisCount)
	cfg := plugin.Config{
		Store:       lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: name}),
		Consistency: plugin.Table,
		// window-2s: the plugin's sticky window over Eventual reads.
		StickyWindow: e.stickyWindow(),
		Logger:       slog.New(slog.NewTextHandler(e.o.Progress, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnDecision: func(ctx context.Context, d plugin.Decision) {
			if ctx.Value(readMark{}) == nil {
				return
			}
			e.reasonsMu.Lock()
			e.reasons[d.Reason]++
			e.reasonsMu.Unlock()
		},
	}
	if e.strategy == FreshTableWait || e.strategy == FreshKeyWait {
		cfg.MaxWait = e.o.MaxWait
	}
	cfg.TablePositions = e.strategy != FreshKey && e.strategy != FreshKeyWait
	e.reasons = map[plugin.Reason]int64{}
	for i, r := range replicas {
		cfg.Replicas = append(cfg.Replicas, plugin.Replica{Name: fmt.Sprintf("replica%d", i), Dialector: e.cl.dialector(r)})
	}
	p := plugin.New(cfg)
	if err := db.Use(p); err != nil {
		return fail(err)
	}
	closers = append(closers, func() { p.Close() })
	return closeAll, nil
}

// warmUp reads from every table with every worker at once, so that the
// connection pools (database and Redis) are mostly dialed before the
// measurement, and waits until the plugin's poller has seen the replicas.
func (e *env) warmUp(ctx context.Context) error {
	errs := make([]error, e.o.Workers)
	var wg sync.WaitGroup
	for w := 0; w < e.o.Workers; w++ {
		wg.Go(func() {
			for i := 0; i < 4*e.o.Tables && errs[w] == nil; i++ {
				_, _, errs[w] = e.readRow(ctx, i%e.o.Tables, w%e.o.Users+1)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	time.Sleep(100 * time.Millisecond)
	e.reasonsMu.Lock()
	clear(e.reasons)
	e.reasonsMu.Unlock()
	return nil
}

func (e *env) readRow(ctx context.Context, t, id int) (version int64, port int, err error) {
	var res struct {
		Version int64
		Port    int
	}
	// The model names the table's key (for freshread-key); the SQL is the
	// same for every strategy.
	err = e.db.WithContext(ctx).Table(tableName(t)).Model(&row{}).Select(e.cl.readColumns()).
		Where("id = ?", id).Scan(&res).Error
	return res.Version, res.Port, err
}

func (e *env) writeRow(ctx context.Context, t, id int) (int64, error) {
	if e.o.Engine == MariaDB {
		return e.writeRowNoReturning(ctx, t, id)
	}
	r := row{}
	tx := e.db.WithContext(ctx).Table(tableName(t)).Model(&r).
		Clauses(clause.Returning{Columns: []clause.Column{{Name: "version"}}}).
		Where("id = ?", id).Update("version", gorm.Expr("version + 1"))
	if tx.Error != nil {
		return 0, tx.Error
	}
	if tx.RowsAffected != 1 || r.Version == 0 {
		return 0, fmt.Errorf("update %s id %d: %d rows, version %d", tableName(t), id, tx.RowsAffected, r.Version)
	}
	return r.Version, nil
}

// writeRowNoReturning is writeRow without RETURNING (MariaDB): the UPDATE
// and a SELECT of the same row in one transaction on the primary. The
// UPDATE's row lock is held until COMMIT, so the SELECT reads the version
// this transaction wrote.
func (e *env) writeRowNoReturning(ctx context.Context, t, id int) (int64, error) {
	var version int64
	err := e.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		u := tx.Table(tableName(t)).Model(&row{}).Where("id = ?", id).Update("version", gorm.Expr("version + 1"))
		if u.Error != nil {
			return u.Error
		}
		if u.RowsAffected != 1 {
			return fmt.Errorf("update %s id %d: %d rows", tableName(t), id, u.RowsAffected)
		}
		var res struct {
			Version int64
			Port    int
		}
		if err := tx.Table(tableName(t)).Select(e.cl.readColumns()).Where("id = ?", id).Scan(&res).Error; err != nil {
			return err
		}
		if res.Port != e.primary || res.Version == 0 {
			return fmt.Errorf("read-back of %s id %d in the write transaction: version %d from port %d, want the primary :%d", tableName(t), id, res.Version, res.Port, e.primary)
		}
		version = res.Version
		return nil
	})
	return version, err
}

func (e *env) stickyWindow() time.Duration {
	if e.strategy == Window {
		return e.o.Window
	}
	return 0
}

// userCtx is the context of one operation of user u.
func (e *env) userCtx(base context.Context, u int, read bool) context.Context {
	ctx := base
	if read {
		ctx = context.WithValue(ctx, readMark{}, true)
	}
	switch e.strategy {
	case FreshTableSession:
		ctx = plugin.ContextWithSession(ctx, e.sessions[u])
	case Window:
		ctx = plugin.WithConsistency(plugin.ContextWithSession(ctx, e.sessions[u]), plugin.Eventual)
	}
	return ctx
}

type workerStats struct {
	reads, writes, errs, replica, stale, refused int64
	lat, writeLat                                []time.Duration
	firstErr                                     error
}

// storeFault starts Options.StoreFault and returns its end.
func (e *env) storeFault() (func(), error) {
	r := e.storeRelay
	if r == nil {
		return func() {}, nil
	}
	switch e.o.StoreFault {
	case "slow":
		r.SetDelay(200 * time.Millisecond)
		return func() { r.SetDelay(0) }, nil
	case "stalled":
		r.Partition(true)
		return func() { r.Partition(false) }, nil
	case "refused":
		r.Refuse(true)
		return func() { r.Refuse(false) }, nil
	}
	return nil, fmt.Errorf("workload: unknown store fault %q (slow, stalled, refused)", e.o.StoreFault)
}

func (e *env) run(ctx context.Context) (Result, error) {
	o := e.o
	var readBefore, allBefore int64
	if e.redisCount != nil {
		readBefore, allBefore = e.redisCount.read.Load(), e.redisCount.all.Load()
	}
	endFault, err := e.storeFault()
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	deadline := start.Add(o.Duration)
	var slot atomic.Int64
	stats := make([]workerStats, o.Workers)
	var wg sync.WaitGroup
	for w := 0; w < o.Workers; w++ {
		wg.Go(func() {
			st := &stats[w]
			rng := rand.New(rand.NewPCG(o.Seed, uint64(w)+1))
			for ctx.Err() == nil {
				if o.Rate > 0 {
					at := start.Add(time.Duration(float64(slot.Add(1)-1) / o.Rate * float64(time.Second)))
					// Stop at the deadline even when behind schedule: a
					// strategy slower than the rate starts fewer operations
					// (lower ops/s) instead of running past Duration.
					if !at.Before(deadline) || !time.Now().Before(deadline) {
						return
					}
					if d := time.Until(at); d > 0 {
						time.Sleep(d)
					}
				} else if !time.Now().Before(deadline) {
					return
				}
				e.op(ctx, rng, st)
			}
		})
	}
	wg.Wait()
	endFault()
	res := Result{Strategy: e.strategy, Elapsed: time.Since(start)}
	var lat, writeLat []time.Duration
	var errs []error
	for i := range stats {
		st := &stats[i]
		res.Reads += st.reads
		res.Writes += st.writes
		res.Errors += st.errs
		res.ReplicaReads += st.replica
		res.StaleReads += st.stale
		res.WritesRefused += st.refused
		lat = append(lat, st.lat...)
		writeLat = append(writeLat, st.writeLat...)
		if st.firstErr != nil {
			errs = append(errs, st.firstErr)
		}
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if res.Errors > 0 {
		fmt.Fprintf(o.Progress, "%s: %d failed operations, e.g. %v\n", e.strategy, res.Errors, errors.Join(errs...))
	}
	slices.SortFunc(lat, cmp.Compare)
	res.ReadP50, res.ReadP99 = quantile(lat, 0.50), quantile(lat, 0.99)
	slices.SortFunc(writeLat, cmp.Compare)
	res.WriteP50, res.WriteP99 = quantile(writeLat, 0.50), quantile(writeLat, 0.99)
	if e.redisCount != nil {
		res.UsesRedis = true
		res.StoreReadCmds = e.redisCount.read.Load() - readBefore
		res.StoreAllCmds = e.redisCount.all.Load() - allBefore
		e.reasonsMu.Lock()
		res.Reasons = maps.Clone(e.reasons)
		e.reasonsMu.Unlock()
		e.redisCount.mu.Lock()
		if len(e.redisCount.other) > 0 {
			fmt.Fprintf(o.Progress, "%s: Redis commands with a read's context other than MGET: %v\n", e.strategy, e.redisCount.other)
		}
		e.redisCount.mu.Unlock()
	}
	return res, nil
}

// quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// op runs one operation of a random user.
func (e *env) op(ctx context.Context, rng *rand.Rand, st *workerStats) {
	o := e.o
	u := rng.IntN(o.Users)
	t := rng.IntN(o.Tables)
	if rng.Float64() >= o.ReadFraction {
		id := u + 1
		began := time.Now()
		v, err := e.writeRow(e.userCtx(ctx, u, false), t, id)
		if err != nil {
			if errors.Is(err, plugin.ErrStoreUnreachable) {
				st.refused++
			}
			st.fail(err)
			return
		}
		st.writeLat = append(st.writeLat, time.Since(began))
		raise(&e.acked[t][id-1], v)
		st.writes++
		return
	}
	id := u + 1
	if rng.Float64() >= o.OwnReads {
		id = rng.IntN(o.Users) + 1
	}
	want := e.acked[t][id-1].Load()
	rctx := e.userCtx(ctx, u, true)
	began := time.Now()
	v, port, err := e.readRow(rctx, t, id)
	lat := time.Since(began)
	if err != nil {
		st.fail(err)
		return
	}
	st.reads++
	st.lat = append(st.lat, lat)
	if port != e.primary {
		st.replica++
	}
	if v < want {
		st.stale++
	}
}

func (st *workerStats) fail(err error) {
	st.errs++
	if st.firstErr == nil {
		st.firstErr = err
	}
}

// raise sets a to at least v.
func raise(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if cur >= v || a.CompareAndSwap(cur, v) {
			return
		}
	}
}
