package reshardload

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/reshard"
	"github.com/freshread/freshread/sharding"
)

// Env is where a scenario runs.
type Env struct {
	// PG holds the shared bucket map, and the shard databases and the
	// default database unless Maria is set.
	PG *testcluster.Postgres
	// Maria, when set, holds the shard databases and the default
	// database instead (MariaDB shards; the map stays in PostgreSQL).
	Maria     *testcluster.MariaDB
	RedisAddr string
	// Spawn returns a command that runs this binary as a worker process
	// (one calling WorkerMain first). Nil: the "processes" are goroutine
	// groups of this process, each with its own sharded *gorm.DB.
	Spawn func() *exec.Cmd
	// Logf, when set, receives progress lines.
	Logf func(format string, args ...any)
}

// Options shape a scenario's workload.
type Options struct {
	// Processes is the number of worker processes. Default 3.
	Processes int
	// UsersPerProcess is the number of users each process owns. Default 40.
	UsersPerProcess int
	// Goroutines per process. Default 2.
	Goroutines int
	// Warmup is how long the workload runs before the first move.
	// Default 3s.
	Warmup time.Duration
	// Settle is how long it runs after the last move. Default 2s.
	Settle time.Duration
	// SlowRefresh is the map refresh interval of the last process, which
	// therefore still routes with the old map at each switch and meets the
	// guard. Default 500ms (the others use the default 100ms).
	SlowRefresh time.Duration
	// Pause between two operations of a goroutine. Default 2ms.
	Pause time.Duration
	// Buckets of the map. Default 1024.
	Buckets int
	// LagRead: see WorkerConfig.LagRead (RunMigration sets it to 1s
	// when zero).
	LagRead time.Duration
}

func (o Options) withDefaults() Options {
	if o.Processes <= 0 {
		o.Processes = 3
	}
	if o.UsersPerProcess <= 0 {
		o.UsersPerProcess = 40
	}
	if o.Goroutines <= 0 {
		o.Goroutines = 2
	}
	if o.Warmup <= 0 {
		o.Warmup = 3 * time.Second
	}
	if o.Settle <= 0 {
		o.Settle = 2 * time.Second
	}
	if o.SlowRefresh <= 0 {
		o.SlowRefresh = 500 * time.Millisecond
	}
	if o.Pause <= 0 {
		o.Pause = 2 * time.Millisecond
	}
	if o.Buckets <= 0 {
		o.Buckets = 1024
	}
	return o
}

// MoveFigures are one move's (or one plan's) measured figures.
type MoveFigures struct {
	ID             string
	RowsCopied     int64
	CopyTime       time.Duration
	CopyRowsPerSec float64
	CatchUpLag     time.Duration // the last catch-up round's lag
	Hold           time.Duration
	Drain, Apply   time.Duration
	Verify, Record time.Duration
	Acks           time.Duration
	HoldChanges    int64
	CleanedRows    int64
}

// Report is what a scenario measured and found.
type Report struct {
	Kind string
	// Engine is the shards' engine: EnginePostgres or EngineMariaDB.
	Engine     string
	MapVersion int64
	Moves      []MoveFigures
	// HoldP50 and HoldMax over the moves' write holds.
	HoldP50, HoldMax time.Duration
	// Workload totals over every process.
	Creates, Updates, Deletes, Reads, Refused, Uncertain, ReadErrors int
	LagReads, ScatterReads, IDReads                                  int
	Anomalies                                                        []string
	Errors                                                           map[string]int
	Metrics                                                          map[string]float64
	// Write latency of acknowledged writes before the first move began
	// and while moves ran (copy to cleanup), p50 and p99.
	WriteBefore, WriteDuring   [2]time.Duration
	WritesBefore, WritesDuring int
	Placement                  Placement
}

// Failed says whether the scenario found anything wrong.
func (r *Report) Failed() bool { return len(r.Anomalies) > 0 || len(r.Placement.Problems) > 0 }

type cluster struct {
	env      Env
	opts     Options
	names    []string
	server   shardServer
	dbNames  map[string]string
	direct   map[string]*gorm.DB
	sqlDBs   map[string]*sql.DB
	mapDSN   string
	defDSN   string
	store    *sharding.SQLMapStore
	mapSQL   *sql.DB
	rdb      *redis.Client
	recorder map[string]*plugin.Plugin
	closers  []func()

	progMu   sync.Mutex
	copied   map[string]reshard.Progress // last copy progress per move
	caughtUp map[string]reshard.Progress // last catch-up progress per move
}

func (c *cluster) logf(format string, args ...any) {
	if c.env.Logf != nil {
		c.env.Logf(format, args...)
	}
}

func (c *cluster) close() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
}

// newCluster makes a default database (which holds the map) and one
// database per shard name, with the tables, and publishes initial as the
// first map version.
func newCluster(ctx context.Context, env Env, opts Options, names []string, initial sharding.Algorithm) (*cluster, error) {
	c := &cluster{env: env, opts: opts, names: names, server: env.server(), dbNames: map[string]string{}, direct: map[string]*gorm.DB{},
		sqlDBs: map[string]*sql.DB{}, recorder: map[string]*plugin.Plugin{},
		copied: map[string]reshard.Progress{}, caughtUp: map[string]reshard.Progress{}}
	pg, srv := env.PG, c.server
	mapDB, err := pg.NewDatabase(ctx)
	if err != nil {
		return nil, err
	}
	c.mapDSN = pg.PrimaryDSN(mapDB)
	c.defDSN = c.mapDSN
	if srv.engine() != EnginePostgres {
		def, err := srv.newDatabase(ctx)
		if err != nil {
			return nil, err
		}
		c.defDSN = srv.primaryDSN(def)
	}
	c.rdb = redis.NewClient(&redis.Options{Addr: env.RedisAddr})
	c.closers = append(c.closers, func() { c.rdb.Close() })
	if c.mapSQL, err = sql.Open("pgx", c.mapDSN); err != nil {
		return nil, err
	}
	c.closers = append(c.closers, func() { c.mapSQL.Close() })
	c.store = sharding.NewSQLMapStore(c.mapSQL)
	if err := c.store.EnsureSchema(ctx); err != nil {
		return c, err
	}
	for _, n := range names {
		dbName, err := srv.newDatabase(ctx)
		if err != nil {
			return c, err
		}
		c.dbNames[n] = dbName
		d, err := gorm.Open(dialector(srv.engine(), srv.primaryDSN(dbName)), quiet())
		if err != nil {
			return c, err
		}
		if err := Migrate(d); err != nil {
			return c, err
		}
		c.direct[n] = d
		c.closers = append(c.closers, func() {
			if s, err := d.DB(); err == nil {
				s.Close()
			}
		})
		sq, err := sql.Open(driverName(srv.engine()), srv.primaryDSN(dbName))
		if err != nil {
			return c, err
		}
		c.sqlDBs[n] = sq
		c.closers = append(c.closers, func() { sq.Close() })
		// The mover's recorder: a freshread plugin on the shard with the
		// processes' store, so the copied rows' positions are published
		// where every process's shard plugin reads them.
		rec, err := gorm.Open(dialector(srv.engine(), srv.primaryDSN(dbName)), quiet())
		if err != nil {
			return c, err
		}
		fc := ShardFreshness(c.rdb, n)
		for i, r := range srv.replicaDSNs(dbName) {
			fc.Replicas = append(fc.Replicas, plugin.Replica{Name: fmt.Sprintf("r%d", i), Dialector: dialector(srv.engine(), r)})
		}
		p := plugin.New(fc)
		if err := rec.Use(p); err != nil {
			return c, err
		}
		c.recorder[n] = p
		c.closers = append(c.closers, func() {
			p.Close()
			if s, err := rec.DB(); err == nil {
				s.Close()
			}
		})
	}
	if err := srv.waitCaughtUp(ctx); err != nil {
		return c, err
	}
	m, err := sharding.MapFromAlgorithm(initial, names, nil)
	if err != nil {
		return c, err
	}
	if _, err := c.store.Publish(ctx, 0, m); err != nil {
		return c, err
	}
	return c, nil
}

func (c *cluster) moverConfig() reshard.Config {
	cfg := reshard.Config{
		Tables: []reshard.Table{{Name: "orders", Key: "user_id"}, {Name: "order_items", Key: "user_id"}},
		Store:  c.store,
		Progress: func(p reshard.Progress) {
			c.progMu.Lock()
			switch p.Phase {
			case sharding.MoveCopying:
				c.copied[p.Move] = p
			case sharding.MoveCatchingUp:
				c.caughtUp[p.Move] = p
			}
			c.progMu.Unlock()
			if p.Phase == sharding.MoveCopying && p.Rows%5000 != 0 {
				return
			}
			c.logf("reshard: %s %s %s rows=%d (%.0f/s) lag=%s changes=%d", p.Move, p.Phase, p.Table, p.Rows, p.RowsPerSecond, p.Lag, p.Changes)
		},
	}
	for _, n := range c.names {
		sh := reshard.Shard{Name: n, DB: c.sqlDBs[n], RecordWrite: c.recorder[n].RecordWrite}
		if c.server.engine() == EngineMariaDB {
			sh.BinlogDSN = c.server.primaryDSN(c.dbNames[n])
		}
		cfg.Shards = append(cfg.Shards, sh)
	}
	return cfg
}

// processes starts the worker processes (or goroutine groups) over all
// the shards; initial names the shards of the initial EvenBuckets map.
func (c *cluster) processes(ctx context.Context, initial []string) (stop func() ([]Result, error), err error) {
	var shards []ShardDSNs
	for _, n := range c.names {
		shards = append(shards, ShardDSNs{Name: n, Primary: c.server.primaryDSN(c.dbNames[n]), Replicas: c.server.replicaDSNs(c.dbNames[n])})
	}
	var (
		procs   []*Process
		cancels []context.CancelFunc
		mu      sync.Mutex
		inproc  [][]Result
		errs    []error
		wg      sync.WaitGroup
	)
	fail := func(err error) (func() ([]Result, error), error) {
		for _, pr := range procs {
			pr.Stop()
		}
		for _, cancel := range cancels {
			cancel()
		}
		wg.Wait()
		return nil, err
	}
	for p := 0; p < c.opts.Processes; p++ {
		pc := ProcessConfig{Engine: c.server.engine(), Default: c.defDSN, MapDSN: c.mapDSN, Redis: c.env.RedisAddr, Shards: shards,
			Buckets: c.opts.Buckets, Initial: initial, Worker: 10 + p, Seed: uint64(1000 + p),
			MapRefresh: 100 * time.Millisecond, MapLease: 2 * time.Second, Pause: c.opts.Pause, Goroutines: c.opts.Goroutines,
			LagRead: c.opts.LagRead}
		if p == c.opts.Processes-1 && c.opts.Processes > 1 {
			pc.MapRefresh, pc.MapLease = c.opts.SlowRefresh, 4*c.opts.SlowRefresh
		}
		for u := 0; u < c.opts.UsersPerProcess; u++ {
			// Spread users over every bucket: user IDs far apart.
			pc.Users = append(pc.Users, int64(1+p+c.opts.Processes*u)*7919)
		}
		if c.env.Spawn != nil {
			pr, err := StartProcess(c.env.Spawn(), pc)
			if err != nil {
				return fail(err)
			}
			procs = append(procs, pr)
			continue
		}
		pctx, cancel := context.WithCancel(ctx)
		cancels = append(cancels, cancel)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs, err := RunProcess(pctx, pc)
			mu.Lock()
			defer mu.Unlock()
			inproc = append(inproc, rs)
			errs = append(errs, err)
		}()
	}
	// Ready once every process follows the map (has acknowledged it). A
	// slow machine only makes this slower: it fails when no further
	// process has come to follow the map for two minutes.
	const stall = 2 * time.Minute
	deadline, best := time.Now().Add(stall), 0
	for {
		cs, err := c.store.Clients(ctx)
		if err != nil {
			return fail(err)
		}
		live := 0
		for _, cl := range cs {
			if cl.Age < time.Second {
				live++
			}
		}
		if live >= c.opts.Processes {
			break
		}
		if live > best {
			deadline, best = time.Now().Add(stall), live
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("reshardload: %d of %d worker processes follow the bucket map, and none more came to for %s (a worker that cannot load the map logs why; FRESHREAD_DOCKER=0 runs the servers as local processes)", live, c.opts.Processes, stall))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return func() ([]Result, error) {
		var all []Result
		var errList []error
		for _, pr := range procs {
			rs, err := pr.Stop()
			all = append(all, rs...)
			errList = append(errList, err)
		}
		for _, cancel := range cancels {
			cancel()
		}
		wg.Wait()
		for _, rs := range inproc {
			all = append(all, rs...)
		}
		return all, errors.Join(append(errList, errs...)...)
	}, nil
}

func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q * float64(len(ds)-1))
	return ds[i]
}

// summarize fills the report's workload part from the workers' results.
func summarize(r *Report, results []Result, movesStart, movesEnd time.Time) {
	r.Errors = map[string]int{}
	r.Metrics = map[string]float64{}
	var before, during []time.Duration
	for _, res := range results {
		st := res.Stats
		r.Creates += st.Creates
		r.Updates += st.Updates
		r.Deletes += st.Deletes
		r.Reads += st.Reads
		r.LagReads += st.LagReads
		r.ScatterReads += st.ScatterReads
		r.IDReads += st.IDReads
		r.Refused += st.Refused
		r.Uncertain += st.Uncertain
		r.ReadErrors += st.ReadErrors
		r.Anomalies = append(r.Anomalies, st.Anomalies...)
		for k, v := range st.Errors {
			r.Errors[k] += v
		}
		for k, v := range res.Metrics {
			if k == "freshread_sharding_map_version" {
				r.Metrics[k] = max(r.Metrics[k], v)
				continue
			}
			r.Metrics[k] += v
		}
		for _, w := range st.Writes {
			at := time.Unix(0, w.At)
			switch {
			case at.Before(movesStart):
				before = append(before, time.Duration(w.D))
			case at.Before(movesEnd):
				during = append(during, time.Duration(w.D))
			}
		}
	}
	r.WritesBefore, r.WritesDuring = len(before), len(during)
	r.WriteBefore = [2]time.Duration{percentile(before, 0.5), percentile(before, 0.99)}
	r.WriteDuring = [2]time.Duration{percentile(during, 0.5), percentile(during, 0.99)}
	var holds []time.Duration
	for _, m := range r.Moves {
		holds = append(holds, m.Hold)
	}
	r.HoldP50, r.HoldMax = percentile(holds, 0.5), percentile(holds, 1)
	sort.Strings(r.Anomalies)
}

func logsOf(results []Result) []map[int64]*OrderState {
	var out []map[int64]*OrderState
	for _, r := range results {
		out = append(out, r.Orders)
	}
	return out
}

func figures(id string, rr *reshard.RunReport) MoveFigures {
	f := MoveFigures{ID: id}
	if rr == nil {
		return f
	}
	f.RowsCopied = rr.Copy.Rows
	f.CopyTime = rr.Copy.Duration
	if rr.Copy.Duration > 0 {
		f.CopyRowsPerSec = float64(rr.Copy.Rows) / rr.Copy.Duration.Seconds()
	}
	f.CatchUpLag = rr.CatchUp.Lag
	if rr.Switch != nil {
		addSwitch(&f, rr.Switch)
	}
	return f
}

func addSwitch(f *MoveFigures, sw *reshard.SwitchReport) {
	f.Hold, f.Drain, f.Apply, f.Verify, f.Record, f.Acks, f.HoldChanges = sw.Hold, sw.Drain, sw.Apply, sw.Verify, sw.Record, sw.Acks, sw.Changes
}

// RunDoubling runs the workload over four shards, doubles them to eight
// online (every shard gives the upper half of its buckets to a new one,
// one move after another: copy, catch up, switch, then clean up), and
// checks the result.
func RunDoubling(ctx context.Context, env Env, opts Options) (*Report, error) {
	opts = opts.withDefaults()
	old := []string{"s0", "s1", "s2", "s3"}
	fresh := []string{"s4", "s5", "s6", "s7"}
	names := append(slices.Clone(old), fresh...)
	c, err := newCluster(ctx, env, opts, names, sharding.EvenBuckets(opts.Buckets, old...))
	if c != nil {
		defer c.close()
	}
	if err != nil {
		return nil, err
	}
	stop, err := c.processes(ctx, old)
	if err != nil {
		return nil, err
	}
	rep := &Report{Kind: "doubling 4 -> 8", Engine: env.Engine()}
	return rep, c.underLoad(ctx, opts, rep, stop, func() error {
		m, _, _, err := c.store.Load(ctx)
		if err != nil {
			return err
		}
		plan, _, err := sharding.PlanDoubling(m, fresh)
		if err != nil {
			return err
		}
		cfg := c.moverConfig()
		var movers []*reshard.Mover
		for _, pm := range plan {
			mv, err := reshard.New(cfg, reshard.Move{Buckets: pm.Buckets, From: pm.From, To: pm.To})
			if err != nil {
				return err
			}
			c.logf("reshard: move %s: %d buckets %s -> %s", mv.Move().ID, len(pm.Buckets), pm.From, pm.To)
			rr, err := mv.Run(ctx)
			if err != nil {
				return fmt.Errorf("move %s: %w", mv.Move().ID, err)
			}
			rep.Moves = append(rep.Moves, figures(mv.Move().ID, rr))
			movers = append(movers, mv)
		}
		for i, mv := range movers {
			cr, err := mv.Cleanup(ctx)
			if err != nil {
				return fmt.Errorf("cleanup %s: %w", mv.Move().ID, err)
			}
			rep.Moves[i].CleanedRows = cr.Rows
		}
		return nil
	})
}

// underLoad runs moves (which returns once the moves are cleaned up)
// while the worker processes run, after opts.Warmup; then, after
// opts.Settle, stops the processes (stop, called once whatever happens),
// summarizes what they did and checks where every row ended up.
func (c *cluster) underLoad(ctx context.Context, opts Options, rep *Report, stop func() ([]Result, error), moves func() error) error {
	time.Sleep(opts.Warmup)
	start := time.Now()
	if err := moves(); err != nil {
		stop()
		return err
	}
	end := time.Now()
	time.Sleep(opts.Settle)
	results, err := stop()
	summarize(rep, results, start, end)
	if err != nil {
		return err
	}
	return c.finalCheck(ctx, rep, results)
}

func (c *cluster) finalCheck(ctx context.Context, rep *Report, results []Result) error {
	m, _, _, err := c.store.Load(ctx)
	if err != nil {
		return err
	}
	rep.MapVersion = m.Version
	rep.Placement, err = CheckPlacement(ctx, m, c.direct, logsOf(results), nil)
	return err
}

// RunMigration starts with every bucket on one unsharded database
// ("legacy", holding the tables as they are), runs the workload, then
// migrates it to four shards: stage one copies and keeps the shards
// following the database while reads that accept a lag (AllowLag) use
// them, stage two switches every read and write at once (one hold), then
// the rows are cleaned from the database.
func RunMigration(ctx context.Context, env Env, opts Options, stageOne time.Duration) (*Report, error) {
	opts = opts.withDefaults()
	if opts.LagRead == 0 {
		opts.LagRead = time.Second
	}
	targets := []string{"s0", "s1", "s2", "s3"}
	names := append([]string{"legacy"}, targets...)
	c, err := newCluster(ctx, env, opts, names, sharding.EvenBuckets(opts.Buckets, "legacy"))
	if c != nil {
		defer c.close()
	}
	if err != nil {
		return nil, err
	}
	stop, err := c.processes(ctx, []string{"legacy"})
	if err != nil {
		return nil, err
	}
	rep := &Report{Kind: "migration 1 -> 4", Engine: env.Engine()}
	return rep, c.underLoad(ctx, opts, rep, stop, func() error {
		start := time.Now()
		m, _, _, err := c.store.Load(ctx)
		if err != nil {
			return err
		}
		goal, err := sharding.MapFromAlgorithm(sharding.EvenBuckets(opts.Buckets, targets...), names, nil)
		if err != nil {
			return err
		}
		moves, err := reshard.Diff(m.Owners, goal.Owners)
		if err != nil {
			return err
		}
		plan, err := reshard.NewPlan(c.moverConfig(), moves...)
		if err != nil {
			return err
		}
		// Stage one: copy, catch up, then keep following while reads that
		// accept a lag use the shards, for stageOne once caught up.
		fctx, cancel := context.WithCancel(ctx)
		ferrc := make(chan error, 1)
		go func() { ferrc <- plan.Follow(fctx, 50*time.Millisecond) }()
		if err := plan.WaitCaughtUp(ctx, 50*time.Millisecond, ferrc); err != nil {
			cancel()
			return fmt.Errorf("stage one: %w", err)
		}
		c.logf("reshard: stage one: every shard caught up after %s", time.Since(start).Round(time.Millisecond))
		time.Sleep(stageOne)
		cancel()
		if ferr := <-ferrc; ferr != nil {
			return fmt.Errorf("stage one: %w", ferr)
		}
		c.logf("reshard: stage one done after %s; switching", time.Since(start).Round(time.Millisecond))
		sw, err := plan.Switch(ctx)
		if err != nil {
			return fmt.Errorf("stage two: %w", err)
		}
		f := MoveFigures{ID: "migration"}
		addSwitch(&f, sw)
		c.progMu.Lock()
		for _, p := range c.copied {
			f.RowsCopied += p.Rows
			f.CopyRowsPerSec += p.RowsPerSecond / float64(len(c.copied))
		}
		for _, p := range c.caughtUp {
			f.CatchUpLag = max(f.CatchUpLag, p.Lag)
		}
		c.progMu.Unlock()
		cr, err := plan.Cleanup(ctx)
		if err != nil {
			return fmt.Errorf("cleanup: %w", err)
		}
		f.CleanedRows = cr.Rows
		rep.Moves = append(rep.Moves, f)
		return nil
	})
}
