package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"   // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/go-redis/v9"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/reshard"
	"github.com/freshread/freshread/sharding"
)

func init() {
	register("shard", command{
		summary: "the shared bucket map and online bucket moves (plan, init, status, move, cleanup, rollback, verify, double, migrate)",
		run:     runShard,
	})
}

const shardUsage = `usage: freshread shard <action> --map URL [flags]

  plan     --to N [--new s4,s5,...]      print the doubling plan of the current map
  init     --buckets N --shards s0,s1,.. publish the first map (even ranges), if none is stored
  status                                 the map's version and ranges, moves, following processes
  move     --from A --to B --buckets 0-127,300 [move flags]
                                         prepare, copy, catch up and switch one move (resumes)
  cleanup  --from A --to B --buckets ... delete the moved rows from A (after the switch; resumes)
  rollback --from A --to B --buckets ... undo a move that has not switched
  verify   --from A --to B --buckets ... row counts and checksums per bucket and table
  double   --new s4,s5,...               every move of the doubling plan, one after another, then cleanup
  migrate  --source legacy --targets s0,s1,.. [--follow 30s]
                                         stage one (targets follow the source for --follow,
                                         reads with AllowLag use them), stage two (one switch), cleanup

Move flags (every action but plan, init and status):
  --shard name=DSN            every shard of the map (repeat): a PostgreSQL URL
                              (postgres://...) or a MariaDB DSN of go-sql-driver/mysql
                              (user:password@tcp(host:3306)/shop)
  --engine auto|postgres|mariadb
                              the shards' database (default auto: by each --shard DSN)
  --binlog name=DSN           MariaDB: the DSN of a shard's binlog reader (a user with
                              REPLICATION SLAVE and BINLOG MONITOR; default: its --shard DSN)
  --table name:key            every sharded table with its shard-key column (repeat)
  --redis-url URL, --redis-mode single|cluster|sentinel, --redis-prefix P,
  --store name=database       the freshread position store of the shards' plugins, so the
                              copied rows' positions are published (without it, run the
                              tracker in logical mode, or reads go by the replicas' replay)
  --chunk N                   rows per copy and cleanup chunk (default 1000)

--map is the PostgreSQL URL of the database holding the map (freshread_shard_map),
also when the shards are MariaDB. URLs and DSNs are never printed.`

type shardOpts struct {
	mapURL    string
	shards    shardFlags
	engine    string
	binlogs   multiFlag
	tables    multiFlag
	stores    multiFlag
	redisURL  string
	redisMode string
	redisPfx  string
	chunk     int
	from, to  string
	buckets   string
	toN       int
	newShards string
	nBuckets  int
	initial   string
	source    string
	targets   string
	follow    time.Duration
	timeout   time.Duration
}

// multiFlag collects a repeated string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runShard(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stderr, shardUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	action := args[0]
	fs := flag.NewFlagSet("freshread shard "+action, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o shardOpts
	fs.StringVar(&o.mapURL, "map", "", "PostgreSQL URL of the database holding the bucket map (required)")
	fs.Var(&o.shards, "shard", "a shard as name=DSN, a PostgreSQL URL or a MariaDB DSN (repeat for every shard)")
	fs.StringVar(&o.engine, "engine", "auto", "the shards' database: postgres, mariadb, or auto (by each --shard DSN)")
	fs.Var(&o.binlogs, "binlog", "MariaDB: a shard's binlog reader DSN as name=DSN (repeat; default: the --shard DSN)")
	fs.Var(&o.tables, "table", "a sharded table as name:key-column (repeat)")
	fs.Var(&o.stores, "store", "a shard's position-store database name as shard=name (repeat)")
	fs.StringVar(&o.redisURL, "redis-url", "", "Redis URL of the position store")
	fs.StringVar(&o.redisMode, "redis-mode", "single", "the Redis deployment of --redis-url: "+redisModes)
	fs.StringVar(&o.redisPfx, "redis-prefix", "", `position store key prefix (default "freshread:")`)
	fs.IntVar(&o.chunk, "chunk", 1000, "rows per copy and cleanup chunk")
	fs.StringVar(&o.from, "from", "", "the move's source shard")
	fs.StringVar(&o.to, "to", "", "the move's target shard (plan: the number of shards, e.g. 8)")
	fs.StringVar(&o.buckets, "buckets", "", "the move's buckets, e.g. 0-127,300 (init: the number of buckets)")
	fs.StringVar(&o.newShards, "new", "", "the new shards of a doubling, comma-separated")
	fs.StringVar(&o.initial, "shards", "", "init: the shards of the first map, comma-separated")
	fs.StringVar(&o.source, "source", "", "migrate: the unsharded database's shard name")
	fs.StringVar(&o.targets, "targets", "", "migrate: the shards to spread the buckets over, comma-separated")
	fs.DurationVar(&o.follow, "follow", 10*time.Second, "migrate: how long stage one lasts once the targets have caught up")
	fs.DurationVar(&o.timeout, "switch-timeout", 10*time.Second, "bound of each of the switch's waits")
	if err := fs.Parse(args[1:]); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if o.mapURL == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "freshread shard %s: --map is required\n%s\n", action, shardUsage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	mapDB, err := sql.Open("pgx", o.mapURL)
	if err != nil {
		fmt.Fprintf(stderr, "freshread shard %s: the --map URL does not parse\n", action)
		return 2
	}
	defer mapDB.Close()
	store := sharding.NewSQLMapStore(mapDB)
	if err := store.EnsureSchema(ctx); err != nil {
		fmt.Fprintf(stderr, "freshread shard %s: %v\n", action, err)
		return 1
	}
	var run func(context.Context, *sharding.SQLMapStore, shardOpts, io.Writer) error
	switch action {
	case "plan":
		run = shardPlan
	case "init":
		run = shardInit
	case "status":
		run = shardStatus
	case "move", "cleanup", "rollback", "verify", "double", "migrate":
		run = func(ctx context.Context, st *sharding.SQLMapStore, o shardOpts, w io.Writer) error {
			return shardMove(ctx, action, st, o, w)
		}
	default:
		fmt.Fprintf(stderr, "freshread shard: unknown action %q\n%s\n", action, shardUsage)
		return 2
	}
	if err := run(ctx, store, o, stdout); err != nil {
		fmt.Fprintf(stderr, "freshread shard %s: %v\n", action, err)
		var usage usageError
		if errors.As(err, &usage) {
			return 2
		}
		return 1
	}
	return 0
}

// usageError is a flag problem (exit status 2).
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// parseBuckets parses "0-127,300".
func parseBuckets(s string) ([]int, error) {
	var out []int
	for _, part := range splitList(s) {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, usageError{fmt.Sprintf("--buckets: %q is not a bucket or a range", part)}
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, usageError{fmt.Sprintf("--buckets: %q is not a range", part)}
			}
		}
		for x := a; x <= b; x++ {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		return nil, usageError{"--buckets is required"}
	}
	return out, nil
}

// ranges renders a map's owners as "s0: 0-255, 512" lines, by shard.
func ranges(m sharding.BucketMap) []string {
	by := map[string][]int{}
	for b, s := range m.Owners {
		by[s] = append(by[s], b)
	}
	var names []string
	for n := range by {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		out = append(out, fmt.Sprintf("%s: %s (%d buckets)", n, bucketList(by[n]), len(by[n])))
	}
	return out
}

func bucketList(bs []int) string {
	var parts []string
	for i := 0; i < len(bs); {
		j := i
		for j+1 < len(bs) && bs[j+1] == bs[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(bs[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", bs[i], bs[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func loadMap(ctx context.Context, st *sharding.SQLMapStore) (sharding.BucketMap, []sharding.MoveStatus, error) {
	m, moves, found, err := st.Load(ctx)
	if err != nil {
		return m, nil, err
	}
	if !found {
		return m, nil, errors.New("no bucket map is stored yet (freshread shard init, or migrate)")
	}
	return m, moves, nil
}

func shardPlan(ctx context.Context, st *sharding.SQLMapStore, o shardOpts, w io.Writer) error {
	m, _, err := loadMap(ctx, st)
	if err != nil {
		return err
	}
	have := m.Shards()
	newShards := splitList(o.newShards)
	if o.to != "" {
		n, err := strconv.Atoi(o.to)
		if err != nil || n != 2*len(have) {
			return usageError{fmt.Sprintf("--to %s: the map has %d shards; a doubling goes to %d", o.to, len(have), 2*len(have))}
		}
		if len(newShards) == 0 {
			for i := len(have); i < n; i++ {
				newShards = append(newShards, fmt.Sprintf("s%d", i))
			}
		}
	}
	moves, next, err := sharding.PlanDoubling(m, newShards)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "map version %d, %d buckets on %d shards:\n", m.Version, len(m.Owners), len(have))
	for _, l := range ranges(m) {
		fmt.Fprintln(w, "  "+l)
	}
	fmt.Fprintf(w, "doubling to %d shards: %d moves\n", len(have)+len(newShards), len(moves))
	for _, mv := range moves {
		fmt.Fprintf(w, "  freshread shard move --from %s --to %s --buckets %s\n", mv.From, mv.To, bucketList(mv.Buckets))
	}
	fmt.Fprintln(w, "then:")
	for _, l := range ranges(next) {
		fmt.Fprintln(w, "  "+l)
	}
	return nil
}

func shardInit(ctx context.Context, st *sharding.SQLMapStore, o shardOpts, w io.Writer) error {
	n, err := strconv.Atoi(o.buckets)
	if err != nil {
		return usageError{"init: --buckets N (the number of buckets) is required"}
	}
	names := splitList(o.initial)
	if len(names) == 0 {
		return usageError{"init: --shards s0,s1,... is required"}
	}
	if _, _, found, err := st.Load(ctx); err != nil {
		return err
	} else if found {
		return errors.New("a bucket map is stored already (freshread shard status)")
	}
	m, err := sharding.MapFromAlgorithm(sharding.EvenBuckets(n, names...), names, nil)
	if err != nil {
		return err
	}
	v, err := st.Publish(ctx, 0, m)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "published map version %d\n", v)
	for _, l := range ranges(m) {
		fmt.Fprintln(w, "  "+l)
	}
	return nil
}

func shardStatus(ctx context.Context, st *sharding.SQLMapStore, _ shardOpts, w io.Writer) error {
	m, moves, err := loadMap(ctx, st)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "map version %d, %d buckets\n", m.Version, len(m.Owners))
	for _, l := range ranges(m) {
		fmt.Fprintln(w, "  "+l)
	}
	for u, s := range m.HotUsers {
		fmt.Fprintf(w, "  hot user %d: %s\n", u, s)
	}
	fmt.Fprintf(w, "moves not done: %d\n", len(moves))
	for _, mv := range moves {
		age := "never caught up"
		if mv.CaughtUpAge >= 0 {
			age = "caught up " + mv.CaughtUpAge.Round(time.Millisecond).String() + " ago"
		}
		fmt.Fprintf(w, "  %s: %s -> %s, buckets %s, %s, %s\n", mv.ID, mv.From, mv.To, bucketList(mv.Buckets), mv.Phase, age)
	}
	cs, err := st.Clients(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "processes: %d\n", len(cs))
	for _, c := range cs {
		state := "following"
		if c.Age > c.Lease {
			state = "silent (past its lease)"
		}
		fmt.Fprintf(w, "  %s: version %d, seen %s ago, lease %s, %s\n", c.ID, c.Version, c.Age.Round(time.Millisecond), c.Lease, state)
	}
	return nil
}

// moverEnv opens every shard and, with a store, a freshread plugin per
// shard whose RecordWrite the mover calls.
func moverEnv(ctx context.Context, st *sharding.SQLMapStore, o shardOpts, w io.Writer) (reshard.Config, func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	cfg := reshard.Config{Store: st, ChunkRows: o.chunk, SwitchTimeout: o.timeout}
	if len(o.shards) == 0 || len(o.tables) == 0 {
		return cfg, closeAll, usageError{"--shard name=URL (every shard) and --table name:key are required"}
	}
	for _, t := range o.tables {
		name, key, ok := strings.Cut(t, ":")
		if !ok || name == "" || key == "" {
			return cfg, closeAll, usageError{fmt.Sprintf("--table %q: want name:key-column", t)}
		}
		cfg.Tables = append(cfg.Tables, reshard.Table{Name: name, Key: key})
	}
	stores := map[string]string{}
	for _, s := range o.stores {
		shard, db, ok := strings.Cut(s, "=")
		if !ok || shard == "" || db == "" {
			return cfg, closeAll, usageError{fmt.Sprintf("--store %q: want shard=database-name", s)}
		}
		stores[shard] = db
	}
	var rdb redis.UniversalClient
	if o.redisURL != "" {
		var err error
		if rdb, err = openRedis(o.redisMode, o.redisURL); err != nil {
			return cfg, closeAll, usageError{err.Error()}
		}
		closers = append(closers, func() { rdb.Close() })
	} else if len(stores) > 0 {
		return cfg, closeAll, usageError{"--store needs --redis-url"}
	}
	binlogs := map[string]string{}
	for _, b := range o.binlogs {
		shard, dsn, ok := strings.Cut(b, "=")
		if !ok || shard == "" || dsn == "" {
			return cfg, closeAll, usageError{"--binlog: want name=DSN"}
		}
		binlogs[shard] = dsn
	}
	for _, sh := range o.shards {
		engine, err := shardEngine(o.engine, sh.dsn)
		if err != nil {
			return cfg, closeAll, usageError{fmt.Sprintf("--shard %s: %v", sh.name, err)}
		}
		driver, dialector := "pgx", func(db *sql.DB) gorm.Dialector { return postgres.New(postgres.Config{Conn: db}) }
		if engine == engineMariaDB {
			driver, dialector = "mysql", func(db *sql.DB) gorm.Dialector { return gormmysql.New(gormmysql.Config{Conn: db}) }
		}
		db, err := sql.Open(driver, sh.dsn)
		if err != nil {
			return cfg, closeAll, usageError{fmt.Sprintf("--shard %s: the DSN does not parse", sh.name)}
		}
		closers = append(closers, func() { db.Close() })
		s := reshard.Shard{Name: sh.name, DB: db}
		if engine == engineMariaDB {
			s.BinlogDSN = sh.dsn
			if b, ok := binlogs[sh.name]; ok {
				s.BinlogDSN = b
			}
		}
		if name, ok := stores[sh.name]; ok {
			g, err := gorm.Open(dialector(db), &gorm.Config{Logger: logger.Discard})
			if err != nil {
				return cfg, closeAll, fmt.Errorf("shard %s: %w", sh.name, err)
			}
			p := plugin.New(plugin.Config{Store: lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: name, Prefix: o.redisPfx})})
			if err := g.Use(p); err != nil {
				return cfg, closeAll, fmt.Errorf("shard %s: %w", sh.name, err)
			}
			closers = append(closers, func() { p.Close() })
			s.RecordWrite = p.RecordWrite
		}
		cfg.Shards = append(cfg.Shards, s)
	}
	last := map[string]time.Time{}
	cfg.Progress = func(p reshard.Progress) {
		if time.Since(last[p.Move+p.Phase]) < time.Second {
			return
		}
		last[p.Move+p.Phase] = time.Now()
		fmt.Fprintf(w, "%s %s %s: %d rows (%.0f rows/s), lag %s (%d bytes), %d changes\n",
			p.Move, p.Phase, p.Table, p.Rows, p.RowsPerSecond, p.Lag.Round(time.Millisecond), p.LagBytes, p.Changes)
	}
	return cfg, closeAll, nil
}

// The engines of --engine.
const (
	enginePostgres = "postgres"
	engineMariaDB  = "mariadb"
)

// pgSettings matches PostgreSQL's key=value connection settings
// ("host=... dbname=...").
var pgSettings = regexp.MustCompile(`^\s*[A-Za-z_]+\s*=`)

// shardEngine is the engine of a --shard DSN: engine when it names one,
// else (auto) PostgreSQL for a postgres:// or postgresql:// URL or
// key=value settings, MariaDB for a go-sql-driver/mysql DSN.
func shardEngine(engine, dsn string) (string, error) {
	lower := strings.ToLower(dsn)
	isPG := strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://") || pgSettings.MatchString(dsn)
	_, mysqlErr := mysql.ParseDSN(dsn)
	switch strings.ToLower(engine) {
	case "postgres", "postgresql", "pg":
		return enginePostgres, nil
	case "mariadb", "mysql":
		if mysqlErr != nil {
			return "", fmt.Errorf("--engine mariadb: not a MariaDB DSN (user:password@tcp(host:3306)/database)")
		}
		return engineMariaDB, nil
	case "", "auto":
		switch {
		case isPG:
			return enginePostgres, nil
		case mysqlErr == nil:
			return engineMariaDB, nil
		}
		return "", fmt.Errorf("neither a PostgreSQL URL (postgres://...) nor a MariaDB DSN (user:password@tcp(host:3306)/database): name the engine with --engine")
	}
	return "", fmt.Errorf("--engine %q: want auto, postgres or mariadb", engine)
}

func printSwitch(w io.Writer, sw *reshard.SwitchReport) {
	if sw == nil {
		return
	}
	fmt.Fprintf(w, "switched %s: map version %d; writes held %s (drain %s, last %d changes %s, verify %s, record %s, publish %s, acknowledgements %s)\n",
		strings.Join(sw.Moves, ", "), sw.Version, sw.Hold.Round(time.Millisecond), sw.Drain.Round(time.Millisecond), sw.Changes,
		sw.Apply.Round(time.Millisecond), sw.Verify.Round(time.Millisecond), sw.Record.Round(time.Millisecond), sw.Publish.Round(time.Millisecond), sw.Acks.Round(time.Millisecond))
}

func shardMove(ctx context.Context, action string, st *sharding.SQLMapStore, o shardOpts, w io.Writer) error {
	cfg, closeAll, err := moverEnv(ctx, st, o, w)
	defer closeAll()
	if err != nil {
		return err
	}
	switch action {
	case "double":
		m, _, err := loadMap(ctx, st)
		if err != nil {
			return err
		}
		plan, _, err := sharding.PlanDoubling(m, splitList(o.newShards))
		if err != nil {
			return err
		}
		var movers []*reshard.Mover
		for _, pm := range plan {
			mv, err := reshard.New(cfg, reshard.Move{Buckets: pm.Buckets, From: pm.From, To: pm.To})
			if err != nil {
				return err
			}
			rr, err := mv.Run(ctx)
			if err != nil {
				return fmt.Errorf("move %s: %w (run the same command again to resume)", mv.Move().ID, err)
			}
			printSwitch(w, rr.Switch)
			movers = append(movers, mv)
		}
		for _, mv := range movers {
			cr, err := mv.Cleanup(ctx)
			if err != nil {
				return fmt.Errorf("cleanup %s: %w (run the same command again to resume)", mv.Move().ID, err)
			}
			fmt.Fprintf(w, "cleaned %s: %d rows deleted from %s in %s\n", mv.Move().ID, cr.Rows, mv.Move().From, cr.Duration.Round(time.Millisecond))
		}
		return nil
	case "migrate":
		if o.source == "" || o.targets == "" {
			return usageError{"migrate: --source and --targets are required"}
		}
		m, _, found, err := st.Load(ctx)
		if err != nil {
			return err
		}
		targets := splitList(o.targets)
		if !found {
			return errors.New("no map is stored: publish the source's (freshread shard init --buckets N --shards " + o.source + ")")
		}
		names := append([]string{o.source}, targets...)
		goal, err := sharding.MapFromAlgorithm(sharding.EvenBuckets(len(m.Owners), targets...), names, nil)
		if err != nil {
			return err
		}
		moves, err := reshard.Diff(m.Owners, goal.Owners)
		if err != nil {
			return err
		}
		plan, err := reshard.NewPlan(cfg, moves...)
		if err != nil {
			return err
		}
		fctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- plan.Follow(fctx, 100*time.Millisecond) }()
		if err := plan.WaitCaughtUp(ctx, 100*time.Millisecond, done); err != nil {
			cancel()
			return fmt.Errorf("stage one: %w", err)
		}
		fmt.Fprintf(w, "stage one: the targets follow the source; reads with sharding.AllowLag use them for %s\n", o.follow)
		select {
		case <-time.After(o.follow):
		case <-ctx.Done():
		}
		cancel()
		if err := <-done; err != nil {
			return fmt.Errorf("stage one: %w", err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted in stage one (run the same command again to resume): %w", ctx.Err())
		}
		sw, err := plan.Switch(ctx)
		if err != nil {
			return fmt.Errorf("stage two: %w (run the same command again to resume)", err)
		}
		printSwitch(w, sw)
		cr, err := plan.Cleanup(ctx)
		if err != nil {
			return fmt.Errorf("cleanup: %w (run freshread shard cleanup per move to resume)", err)
		}
		fmt.Fprintf(w, "cleaned: %d rows deleted from %s in %s\n", cr.Rows, o.source, cr.Duration.Round(time.Millisecond))
		return nil
	}
	buckets, err := parseBuckets(o.buckets)
	if err != nil {
		return err
	}
	if o.from == "" || o.to == "" {
		return usageError{"--from and --to are required"}
	}
	mv, err := reshard.New(cfg, reshard.Move{Buckets: buckets, From: o.from, To: o.to})
	if err != nil {
		return err
	}
	switch action {
	case "move":
		rr, err := mv.Run(ctx)
		if err != nil {
			return fmt.Errorf("move %s: %w (run the same command again to resume, or rollback)", mv.Move().ID, err)
		}
		fmt.Fprintf(w, "copied %d rows (%.0f rows/s); caught up, lag %s\n", rr.Copy.Rows, rr.Copy.RowsPerSecond, rr.CatchUp.Lag.Round(time.Millisecond))
		printSwitch(w, rr.Switch)
		fmt.Fprintf(w, "next: freshread shard cleanup --from %s --to %s --buckets %s ...\n", o.from, o.to, o.buckets)
	case "cleanup":
		cr, err := mv.Cleanup(ctx)
		if err != nil {
			return fmt.Errorf("cleanup %s: %w (run the same command again to resume)", mv.Move().ID, err)
		}
		fmt.Fprintf(w, "cleaned %s: %d rows deleted from %s in %s\n", mv.Move().ID, cr.Rows, o.from, cr.Duration.Round(time.Millisecond))
	case "rollback":
		if err := mv.Rollback(ctx); err != nil {
			return err
		}
		fmt.Fprintf(w, "rolled back %s\n", mv.Move().ID)
	case "verify":
		vr, err := mv.Verify(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "verified %s: %d rows, %d (table, bucket) pairs, %d differ, in %s\n", vr.Move, vr.Rows, vr.Checked, len(vr.Mismatches), vr.Duration.Round(time.Millisecond))
		for _, m := range vr.Mismatches {
			fmt.Fprintln(w, "  "+m.String())
		}
		if !vr.OK() {
			return errors.New("verification found differences")
		}
	}
	return nil
}
