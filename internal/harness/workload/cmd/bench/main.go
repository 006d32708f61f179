// Command bench starts a PostgreSQL primary with two streaming replicas (or,
// with -engine mariadb, a MariaDB primary with one replica) and Redis
// (internal/harness/testcluster), delays apply on the replicas, runs the mixed
// workload of internal/harness/workload once per routing strategy and prints a
// markdown table of the results on stdout (progress on stderr).
//
//	go run ./internal/harness/workload/cmd/bench -duration 20s -users 200 -workers 8 -delay 50ms
//	go run ./internal/harness/workload/cmd/bench -engine mariadb -delay 20ms -strategies always-primary,dbresolver,freshread-table,freshread-table+wait
//
// -delay 0 means no apply delay. Without -delay the delay is 50ms on
// PostgreSQL and 1s on MariaDB. On MariaDB any delay works (20ms, 100ms,
// …): the replica replicates through a relay in this process that holds
// the primary's binlog stream for the delay (testcluster.MariaDB.SetApplyDelay).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/freshread/freshread/internal/harness/workload"
)

func main() {
	var (
		o          workload.Options
		strategies string
		timeout    time.Duration
	)
	flag.DurationVar(&o.Duration, "duration", 20*time.Second, "workload duration per strategy")
	flag.IntVar(&o.Users, "users", 200, "users, each owning one row per table")
	flag.IntVar(&o.Workers, "workers", 8, "concurrent workers (each reads and writes)")
	flag.IntVar(&o.Workers, "readers", 8, "synonym of -workers")
	flag.IntVar(&o.Tables, "tables", 4, "tables written and read")
	flag.Float64Var(&o.ReadFraction, "read-fraction", 0.9, "share of operations that read")
	flag.Float64Var(&o.OwnReads, "own-reads", 0.5, "share of reads of the user's own row (rest: a random user's row); negative: 0")
	flag.Float64Var(&o.Rate, "rate", 0, "operations started per second over all workers; 0: back to back")
	flag.StringVar(&o.Engine, "engine", workload.Postgres, "postgres (primary + 2 replicas) or mariadb (primary + 1 replica)")
	flag.DurationVar(&o.Delay, "delay", 0, "apply delay on the replicas: recovery_min_apply_delay (postgres) or a relay holding the primary's binlog stream (mariadb; any duration); 0: none; default 50ms (postgres), 1s (mariadb)")
	flag.DurationVar(&o.Window, "window", 2*time.Second, "primary window after a user's write (window strategy)")
	flag.DurationVar(&o.MaxWait, "max-wait", 0, "plugin MaxWait of the freshread-table+wait strategy (default twice -delay, at least 100ms)")
	flag.Uint64Var(&o.Seed, "seed", 1, "random seed")
	flag.StringVar(&o.StoreFault, "store-fault", "", "during the run, the plugin's Redis through a relay: slow (answers 200ms late), stalled (nothing answers, as under SIGSTOP), refused (connections reset); empty: none")
	flag.StringVar(&o.Pooler, "pooler", "", "between the workload and PostgreSQL: pgbouncer (transaction mode, pgx in simple_protocol) or pgbouncer-session; empty: none")
	flag.StringVar(&strategies, "strategies", "", "comma-separated strategies (default all: "+joinStrategies(workload.AllStrategies)+")")
	flag.DurationVar(&timeout, "timeout", 30*time.Minute, "give up after this long")
	flag.Parse()
	delaySet := false
	flag.Visit(func(f *flag.Flag) { delaySet = delaySet || f.Name == "delay" })
	if delaySet && o.Delay == 0 {
		o.Delay = -1 // an explicit -delay 0: none (Options' zero is the default)
	}
	if strategies != "" {
		for _, s := range strings.Split(strategies, ",") {
			o.Strategies = append(o.Strategies, workload.Strategy(strings.TrimSpace(s)))
		}
	}
	o.Progress = os.Stderr

	var results []workload.Result
	took, err := workload.RunCommand(timeout, func(ctx context.Context) (err error) {
		results, err = workload.Run(ctx, o)
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	printTable(os.Stdout, o.WithDefaults(), results) // Run applied the same defaults
	fmt.Fprintf(os.Stderr, "total wall time %v\n", took.Round(time.Second))
}

func joinStrategies(ss []workload.Strategy) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = string(s)
	}
	return strings.Join(parts, ",")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func printTable(w io.Writer, o workload.Options, results []workload.Result) {
	rate := "back to back"
	if o.Rate > 0 {
		rate = fmt.Sprintf("%g ops/s", o.Rate)
	}
	replicas := "PostgreSQL, 2 replicas"
	if o.Engine == workload.MariaDB {
		replicas = "MariaDB, 1 replica"
	}
	fault := ""
	if o.StoreFault != "" {
		fault = fmt.Sprintf(" Store fault during the run: %s.", o.StoreFault)
	}
	fmt.Fprintf(w, "Workload (%s): %v per strategy, %d users, %d workers, %d tables, %.0f%% reads (%.0f%% of them of the user's own row), rate %s, apply delay %v on every replica, window %v, MaxWait %v.%s\n\n",
		replicas, o.Duration, o.Users, o.Workers, o.Tables, 100*o.ReadFraction, 100*max(o.OwnReads, 0), rate, o.Delay, o.Window, o.MaxWait, fault)
	fmt.Fprintln(w, "| strategy | reads | writes | errors (writes refused) | ops/s | reads on replicas | stale reads | read p50 | read p99 | write p50 | write p99 | store round trips / read | all store commands / op |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		ops := r.Reads + r.Writes
		rt, all := "– (no store)", "–"
		if r.UsesRedis {
			rt = fmt.Sprintf("%.3f", r.StoreRoundTripsPerRead())
			all = fmt.Sprintf("%.3f", float64(r.StoreAllCmds)/float64(max(ops, 1)))
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d (%d) | %.0f | %.1f %% | %d (%.2f %%) | %s | %s | %s | %s | %s | %s |\n",
			r.Strategy, r.Reads, r.Writes, r.Errors, r.WritesRefused, float64(ops)/r.Elapsed.Seconds(),
			100*r.ReplicaShare(), r.StaleReads, 100*float64(r.StaleReads)/float64(max(r.Reads, 1)),
			ms(r.ReadP50), ms(r.ReadP99), ms(r.WriteP50), ms(r.WriteP99), rt, all)
	}
}
