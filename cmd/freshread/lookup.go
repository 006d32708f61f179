package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/lookup"
)

func init() {
	register("lookup", command{
		summary: "build or repair the order-ID lookup of sharded tables (lookup backfill)",
		run:     runLookup,
	})
}

// shardFlags collects repeated --shard name=postgres-url flags.
type shardFlags []struct{ name, dsn string }

func (s *shardFlags) String() string { return fmt.Sprint(len(*s), " shards") }

func (s *shardFlags) Set(v string) error {
	name, dsn, ok := strings.Cut(v, "=")
	if !ok || name == "" || dsn == "" {
		return fmt.Errorf("want name=postgres-url, got %q", v)
	}
	*s = append(*s, struct{ name, dsn string }{name, dsn})
	return nil
}

func runLookup(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "backfill" {
		fmt.Fprintln(stderr, "usage: freshread lookup backfill --lookup URL --shard name=URL [--shard ...] [flags]")
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return 0
		}
		return 2
	}
	fs := flag.NewFlagSet("freshread lookup backfill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var shards shardFlags
	lookupURL := fs.String("lookup", "", "PostgreSQL URL of the lookup database (required)")
	fs.Var(&shards, "shard", "a shard as name=postgres-url (repeat for each shard)")
	table := fs.String("table", "orders", "the sharded table")
	idCol := fs.String("id-column", "id", "the table's order-ID column")
	keyCol := fs.String("key-column", "user_id", "the table's shard-key column")
	lookupTable := fs.String("lookup-table", "order_lookup", "the lookup table")
	chunk := fs.Int("chunk", 1000, "rows per keyset chunk")
	restart := fs.Bool("restart", false, "ignore recorded progress and start over")
	redisAddr := fs.String("redis", "", "Redis host:port of the lookup cache, to fill it as well (optional; see --redis-url for Cluster and Sentinel)")
	redisURL := fs.String("redis-url", "", "Redis URL of the lookup cache instead of --redis, in --redis-mode's form (see freshread tracker --help)")
	redisMode := fs.String("redis-mode", "single", "the Redis deployment of --redis-url: "+redisModes)
	redisPrefix := fs.String("redis-prefix", "freshread:lookup:", "key prefix of the lookup cache")
	if err := fs.Parse(args[1:]); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *lookupURL == "" || len(shards) == 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "freshread lookup backfill: --lookup and at least one --shard are required")
		return 2
	}
	quiet := &gorm.Config{Logger: logger.Discard}
	ldb, err := gorm.Open(postgres.Open(*lookupURL), quiet)
	if err != nil {
		fmt.Fprintf(stderr, "freshread lookup backfill: open the lookup database: %v\n", err)
		return 1
	}
	defer closeGorm(ldb)
	var sources []lookup.Source
	for _, s := range shards {
		name := s.name
		sdb, err := gorm.Open(postgres.Open(s.dsn), quiet)
		if err != nil {
			fmt.Fprintf(stderr, "freshread lookup backfill: open shard %s: %v\n", name, err)
			return 1
		}
		defer closeGorm(sdb)
		sources = append(sources, lookup.Source{Name: name, DB: sdb})
	}
	cfg := lookup.Config{DB: ldb, Table: *lookupTable, Prefix: *redisPrefix}
	switch {
	case *redisAddr != "" && *redisURL != "":
		fmt.Fprintln(stderr, "freshread lookup backfill: give --redis or --redis-url, not both")
		return 2
	case *redisAddr != "":
		rdb := redis.NewClient(&redis.Options{Addr: *redisAddr})
		defer rdb.Close()
		cfg.Redis = rdb
	case *redisURL != "":
		rdb, err := openRedis(*redisMode, *redisURL)
		if err != nil {
			fmt.Fprintf(stderr, "freshread lookup backfill: --redis-url: %v\n", err)
			return 2
		}
		defer rdb.Close()
		cfg.Redis = rdb
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	n, err := lookup.New(cfg).Backfill(ctx, lookup.BackfillConfig{
		Sources: sources, Table: *table, IDColumn: *idCol, KeyColumn: *keyCol,
		Chunk: *chunk, Restart: *restart, Progress: stdout,
	})
	if err != nil {
		fmt.Fprintf(stderr, "freshread lookup backfill: %v (%d pairs written; run again to resume)\n", err, n)
		return 1
	}
	fmt.Fprintf(stdout, "backfill complete: %d pairs written\n", n)
	return 0
}

func closeGorm(db *gorm.DB) {
	if s, err := db.DB(); err == nil {
		s.Close()
	}
}
