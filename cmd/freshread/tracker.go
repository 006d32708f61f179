package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/freshread/freshread/registry"
	"github.com/freshread/freshread/tracker"
)

func init() {
	register("tracker", command{
		summary: "publish replay positions, table dependencies and direct writes of registered databases",
		run:     runTracker,
	})
}

const trackerUsage = `usage: freshread tracker [flags]

Runs the freshread tracker: for every database announced in Redis (the
"<prefix>database_names" set, filled by the plugin) and every --database,
it publishes each replica's replay position, the dependency graph between
tables (triggers, cascading foreign keys, rules, views) and, with --mode,
the positions of writes made outside the application.

Credentials never go through Redis: the tracker connects with its own,
from --dsn-template (or PGPASSWORD / ~/.pgpass when the template has none).

Quick start:

  export FRESHREAD_REDIS_URL=redis://127.0.0.1:6379/0
  export FRESHREAD_PG_DSN_TEMPLATE='postgres://tracker@{host}:{port}/{database}?sslmode=disable'
  export PGPASSWORD=...              # or put it in the template
  freshread tracker --mode logical --listen :9187

  curl localhost:9187/readyz         # 200 when Redis and every database answer

Redis Cluster and Sentinel (the plugin's store on the same deployment):

  freshread tracker --redis-mode cluster --redis-url 'redis://n1:7000?addr=n2:7000&addr=n3:7000' ...
  freshread tracker --redis-mode sentinel --redis-url 'redis://s1:26379?master_name=freshread&addr=s2:26379' ...

Every flag can also be set by the environment variable in brackets.
Flags:
`

// envDefault returns the environment variable's value, or def.
func envDefault(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, ok := os.LookupEnv(name); ok {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

func envBool(name string) bool {
	b, _ := strconv.ParseBool(os.Getenv(name))
	return b
}

// databaseFlags collects --database values.
type databaseFlags []registry.Entry

func (d *databaseFlags) String() string { return fmt.Sprint(len(*d)) }

// Set parses host:port/database, or an Entry in JSON.
func (d *databaseFlags) Set(v string) error {
	e, err := parseDatabase(v)
	if err != nil {
		return err
	}
	*d = append(*d, e)
	return nil
}

func parseDatabase(v string) (registry.Entry, error) {
	v = strings.TrimSpace(v)
	var e registry.Entry
	if strings.HasPrefix(v, "{") {
		if err := json.Unmarshal([]byte(v), &e); err != nil {
			return e, fmt.Errorf("--database: %v", err)
		}
		return e, e.Validate()
	}
	hostport, db, ok := strings.Cut(v, "/")
	if !ok {
		return e, fmt.Errorf("--database %q: want host:port/database or a JSON entry", v)
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return e, fmt.Errorf("--database %q: %v", v, err)
	}
	e.Host, e.Database = host, db
	e.Port, err = strconv.Atoi(port)
	if err != nil {
		return e, fmt.Errorf("--database %q: bad port", v)
	}
	return e, e.Validate()
}

func runTracker(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("freshread tracker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	redisURL := fs.String("redis-url", "", "Redis URL, redis://[:password@]host:port/db or rediss://; with --redis-mode cluster every seed node as ?addr=host:port&addr=..., with sentinel the sentinels and ?master_name=name [FRESHREAD_REDIS_URL] (required)")
	redisMode := fs.String("redis-mode", envDefault("FRESHREAD_REDIS_MODE", "single"), "the Redis deployment: "+redisModes+" [FRESHREAD_REDIS_MODE]")
	dsnTemplate := fs.String("dsn-template", "", "PostgreSQL connection string with {host}, {port}, {database} (and {role}: primary or a replica name) [FRESHREAD_PG_DSN_TEMPLATE] (required)")
	prefix := fs.String("prefix", envDefault("FRESHREAD_PREFIX", ""), "key prefix, as the plugin's store (default \"freshread:\") [FRESHREAD_PREFIX]")
	mode := fs.String("mode", envDefault("FRESHREAD_TRACKER_MODE", "none"), "direct-write tracking: none, stats (pg_stat_user_tables, ~1-10 s late) or logical (exact; wal_level=logical) [FRESHREAD_TRACKER_MODE]")
	listen := fs.String("listen", envDefault("FRESHREAD_TRACKER_LISTEN", ":9187"), "address of /healthz, /readyz and /metrics; empty disables [FRESHREAD_TRACKER_LISTEN]")
	var dbs databaseFlags
	fs.Var(&dbs, "database", "a database to track besides the registry: host:port/name or an entry in JSON (repeatable) [FRESHREAD_DATABASES, comma-separated host:port/name]")
	noRegistry := fs.Bool("no-registry", envBool("FRESHREAD_NO_REGISTRY"), "track --database only, never read the registry [FRESHREAD_NO_REGISTRY]")
	logFormat := fs.String("log-format", envDefault("FRESHREAD_LOG_FORMAT", "text"), "text or json [FRESHREAD_LOG_FORMAT]")
	logLevel := fs.String("log-level", envDefault("FRESHREAD_LOG_LEVEL", "info"), "debug, info, warn or error [FRESHREAD_LOG_LEVEL]")
	replayInterval := fs.Duration("replay-interval", envDuration("FRESHREAD_REPLAY_INTERVAL", 100*time.Millisecond), "how often replay positions are published [FRESHREAD_REPLAY_INTERVAL]")
	depInterval := fs.Duration("dependency-interval", envDuration("FRESHREAD_DEPENDENCY_INTERVAL", 30*time.Second), "how often the dependency graph is rebuilt [FRESHREAD_DEPENDENCY_INTERVAL]")
	statsInterval := fs.Duration("stats-interval", envDuration("FRESHREAD_STATS_INTERVAL", 250*time.Millisecond), "how often --mode stats polls the counters [FRESHREAD_STATS_INTERVAL]")
	registryInterval := fs.Duration("registry-interval", envDuration("FRESHREAD_REGISTRY_INTERVAL", 5*time.Second), "how often the registry is reread [FRESHREAD_REGISTRY_INTERVAL]")
	slotPrefix := fs.String("slot-prefix", envDefault("FRESHREAD_SLOT_PREFIX", "freshread_"), "replication slot of database d: <slot-prefix><d> [FRESHREAD_SLOT_PREFIX]")
	publication := fs.String("publication", envDefault("FRESHREAD_PUBLICATION", "freshread_tracker"), "publication FOR ALL TABLES used by --mode logical [FRESHREAD_PUBLICATION]")
	noDDLTrigger := fs.Bool("no-ddl-trigger", envBool("FRESHREAD_NO_DDL_TRIGGER"), "--mode logical: do not install the event trigger freshread_ddl that tracks schema changes made outside the plugin [FRESHREAD_NO_DDL_TRIGGER]")
	dropSlot := fs.Bool("drop-slot", false, "drop the replication slot of every tracked database and exit (stop running trackers first)")
	printGraph := fs.Bool("print-graph", false, "print the dependency graph of every tracked database as JSON and exit")
	fs.Usage = func() {
		fmt.Fprint(stderr, trackerUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "freshread tracker: unexpected arguments %q\n", fs.Args())
		return 2
	}
	// Read here, not as flag defaults: --help would print them.
	if *redisURL == "" {
		*redisURL = os.Getenv("FRESHREAD_REDIS_URL")
	}
	if *dsnTemplate == "" {
		*dsnTemplate = os.Getenv("FRESHREAD_PG_DSN_TEMPLATE")
	}
	if env := os.Getenv("FRESHREAD_DATABASES"); env != "" && len(dbs) == 0 {
		for _, v := range strings.Split(env, ",") {
			if err := dbs.Set(v); err != nil {
				fmt.Fprintf(stderr, "freshread tracker: FRESHREAD_DATABASES: %v\n", err)
				return 2
			}
		}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "freshread tracker: --log-level: %v\n", err)
		return 2
	}
	var handler slog.Handler
	switch *logFormat {
	case "text":
		handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	case "json":
		handler = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})
	default:
		fmt.Fprintf(stderr, "freshread tracker: --log-format %q: want text or json\n", *logFormat)
		return 2
	}
	logger := slog.New(handler)
	if *redisURL == "" || *dsnTemplate == "" {
		fmt.Fprintln(stderr, "freshread tracker: --redis-url (FRESHREAD_REDIS_URL) and --dsn-template (FRESHREAD_PG_DSN_TEMPLATE) are required; see --help")
		return 2
	}
	rdb, err := openRedis(*redisMode, *redisURL)
	if err != nil {
		fmt.Fprintf(stderr, "freshread tracker: --redis-url: %v\n", err)
		return 2
	}
	defer rdb.Close()
	dsn, err := tracker.DSNTemplate(*dsnTemplate)
	if err != nil {
		fmt.Fprintf(stderr, "freshread tracker: --dsn-template: %v\n", err)
		return 2
	}
	m, err := tracker.ParseMode(*mode)
	if err != nil {
		fmt.Fprintf(stderr, "freshread tracker: --mode: %v\n", err)
		return 2
	}
	tr, err := tracker.New(tracker.Config{
		Redis: rdb, Prefix: *prefix, DSN: dsn, Databases: dbs, NoRegistry: *noRegistry, Mode: m,
		ReplayInterval: *replayInterval, DependencyInterval: *depInterval, StatsInterval: *statsInterval,
		RegistryInterval: *registryInterval, SlotPrefix: *slotPrefix, Publication: *publication, NoDDLTrigger: *noDDLTrigger, Logger: logger,
	})
	if err != nil {
		fmt.Fprintf(stderr, "freshread tracker: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch {
	case *dropSlot:
		if err := tr.DropSlots(ctx); err != nil {
			logger.Error("drop slots", "err", err)
			return 1
		}
		return 0
	case *printGraph:
		graphs, err := tr.Graphs(ctx)
		out := map[string]any{}
		for id, g := range graphs {
			out[id] = map[string]any{"dependents": g.Closed(), "edges": g.Edges, "everything_because": g.Reasons}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(out)
		if err != nil {
			logger.Error("print graph", "err", err)
			return 1
		}
		return 0
	}

	var srv *http.Server
	if *listen != "" {
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			logger.Error("listen", "addr", *listen, "err", err)
			return 1
		}
		srv = &http.Server{Handler: tr.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		logger.Info("serving /healthz, /readyz, /metrics", "addr", ln.Addr().String())
	}
	err = tr.Run(ctx)
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		srv.Shutdown(sctx)
		cancel()
	}
	if err != nil {
		logger.Error("tracker", "err", err)
		return 1
	}
	logger.Info("stopped")
	return 0
}
