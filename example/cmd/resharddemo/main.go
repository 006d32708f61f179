// Command resharddemo grows a sharded order service online: three worker
// processes (this binary re-executed) create, update, delete and read
// orders while the shards double from four to eight, on PostgreSQL and
// then on MariaDB, and then while an unsharded PostgreSQL database is
// migrated to four shards. Every read is checked against the writers'
// acknowledged writes, and at the end every row must be on the shard the
// bucket map names, once, at its last version.
//
//	go run ./example/cmd/resharddemo                  # all three
//	go run ./example/cmd/resharddemo -only double     # the two doublings
//	go run ./example/cmd/resharddemo -engine mariadb  # the MariaDB doubling
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/freshread/freshread/internal/harness/reshardload"
	"github.com/freshread/freshread/internal/harness/testcluster"
)

func main() {
	reshardload.WorkerMain() // a worker process: runs until its stdin closes, then exits
	only := flag.String("only", "", "run only one scenario: double or migrate")
	engine := flag.String("engine", "", "run only the scenarios on one engine's shards: postgres or mariadb (the migration is on PostgreSQL)")
	verbose := flag.Bool("v", false, "print the mover's progress")
	flag.Parse()
	err := run(*only, *engine, *verbose)
	testcluster.Shutdown()
	if err != nil {
		fmt.Fprintln(os.Stderr, "resharddemo:", err)
		os.Exit(1)
	}
}

func run(only, engine string, verbose bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute) // a bound on a hung demo, not a speed test
	defer cancel()
	if only != "" && only != "double" && only != "migrate" {
		return fmt.Errorf("-only %q: want double or migrate", only)
	}
	if engine != "" && engine != reshardload.EnginePostgres && engine != reshardload.EngineMariaDB {
		return fmt.Errorf("-engine %q: want %s or %s", engine, reshardload.EnginePostgres, reshardload.EngineMariaDB)
	}
	wants := func(scenario, eng string) bool {
		return (only == "" || only == scenario) && (engine == "" || engine == eng)
	}
	servers := []string{"postgres", "redis"} // the map is in PostgreSQL on either engine
	if wants("double", reshardload.EngineMariaDB) {
		servers = append(servers, "mariadb")
	}
	testcluster.Prestart(servers...) // at once
	pg, err := testcluster.SharedPostgres()
	if err != nil {
		return err
	}
	rd, err := testcluster.SharedRedis()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	env := reshardload.Env{PG: pg, RedisAddr: rd.Addr(), Spawn: func() *exec.Cmd { return exec.Command(self) }}
	if verbose {
		env.Logf = func(f string, a ...any) { fmt.Printf(f+"\n", a...) }
	}
	failed := false
	if wants("double", reshardload.EnginePostgres) {
		fmt.Println("== PostgreSQL: doubling 4 -> 8 shards under load (3 processes, one following the map slowly)")
		rep, err := reshardload.RunDoubling(ctx, env, reshardload.Options{})
		if err != nil {
			return fmt.Errorf("PostgreSQL doubling: %w", err)
		}
		failed = print(rep) || failed
	}
	if wants("double", reshardload.EngineMariaDB) {
		fmt.Println("== MariaDB: doubling 4 -> 8 shards under load (3 processes, one following the map slowly; the map in PostgreSQL)")
		m, err := testcluster.SharedMariaDB()
		if err != nil {
			return err
		}
		menv := env
		menv.Maria = m
		rep, err := reshardload.RunDoubling(ctx, menv, reshardload.Options{})
		if err != nil {
			return fmt.Errorf("MariaDB doubling: %w", err)
		}
		failed = print(rep) || failed
	}
	if wants("migrate", reshardload.EnginePostgres) {
		fmt.Println("== PostgreSQL: migrating an unsharded database to 4 shards under load")
		rep, err := reshardload.RunMigration(ctx, env, reshardload.Options{}, 3*time.Second)
		if err != nil {
			return fmt.Errorf("PostgreSQL migration: %w", err)
		}
		failed = print(rep) || failed
	}
	if failed {
		return fmt.Errorf("anomalies found (above)")
	}
	return nil
}

func print(rep *reshardload.Report) bool {
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	for _, m := range rep.Moves {
		fmt.Printf("  %s: copied %d rows (%.0f rows/s), catch-up lag %s; writes held %s (drain %s, last %d changes %s, verify %s, record %s, acks %s); %d rows cleaned\n",
			m.ID, m.RowsCopied, m.CopyRowsPerSec, ms(m.CatchUpLag), ms(m.Hold), ms(m.Drain), m.HoldChanges, ms(m.Apply), ms(m.Verify), ms(m.Record), ms(m.Acks), m.CleanedRows)
	}
	fmt.Printf("  workload: %d creates, %d updates, %d deletes, %d reads (%d accepting a lag, %d by a column that is no shard key, on every shard); %d writes refused by the guard past the plugin's retries (nothing written), %d uncertain\n",
		rep.Creates, rep.Updates, rep.Deletes, rep.Reads, rep.LagReads, rep.ScatterReads, rep.Refused, rep.Uncertain)
	fmt.Printf("  guard: %.0f statements refused by a shard that no longer (or not yet) owned the bucket, %.0f retried on the new owner\n",
		rep.Metrics["freshread_sharding_bucket_moved_total"], rep.Metrics["freshread_sharding_bucket_moved_retries_total"])
	fmt.Printf("  write latency p50/p99: %s/%s before the moves, %s/%s during\n", ms(rep.WriteBefore[0]), ms(rep.WriteBefore[1]), ms(rep.WriteDuring[0]), ms(rep.WriteDuring[1]))
	fmt.Printf("  end (%s shards): map version %d, %d rows checked: %d anomalies in reads, %d placement problems\n", rep.Engine, rep.MapVersion, rep.Placement.Rows, len(rep.Anomalies), len(rep.Placement.Problems))
	for _, a := range rep.Anomalies {
		fmt.Println("  ANOMALY:", a)
	}
	for _, p := range rep.Placement.Problems {
		fmt.Println("  PLACEMENT:", p)
	}
	return rep.Failed()
}
