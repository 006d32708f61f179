// Command fleet measures what a fleet of processes using the plugin costs
// the database servers and Redis (internal/harness/workload.RunFleet): it
// starts a PostgreSQL primary with two streaming replicas, a MariaDB
// primary with one replica and Redis (internal/harness/testcluster), puts
// a counting relay in front of every database server, and for each fleet
// size starts that many processes of this program, each opening GORM with
// the plugin's default Config through the relays. It measures an idle
// phase (no reads or writes, after a warm-up longer than the plugin's idle
// time) and an active phase (a fixed rate of reads and writes over the
// whole fleet, every read checked against the last write acknowledged to
// any process), and prints a markdown table on stdout (progress on
// stderr).
//
//	go run ./internal/harness/workload/cmd/fleet -processes 1,10,100
//	go run ./internal/harness/workload/cmd/fleet -engines postgres -processes 20 -idle 30s
//
// Linux only (the processes share acknowledged versions through a mapped
// file; their CPU time is read from /proc).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/freshread/freshread/internal/harness/workload"
)

func main() {
	if workload.IsFleetChild() {
		os.Exit(workload.FleetChildMain())
	}
	var (
		o                  workload.FleetOptions
		engines, processes string
		timeout            time.Duration
	)
	flag.StringVar(&engines, "engines", "postgres,mariadb", "comma-separated engines: postgres (primary + 2 replicas), mariadb (primary + 1 replica)")
	flag.StringVar(&processes, "processes", "1,10,100", "comma-separated fleet sizes")
	flag.DurationVar(&o.Warmup, "warmup", 10*time.Second, "idle time once every process is ready, before the idle phase (longer than the plugin's idle time)")
	flag.DurationVar(&o.Idle, "idle", 20*time.Second, "length of the idle phase")
	flag.DurationVar(&o.Active, "active", 20*time.Second, "length of the active phase")
	flag.Float64Var(&o.Rate, "rate", 200, "operations per second over the whole fleet in the active phase")
	flag.Float64Var(&o.WriteFraction, "write-fraction", 0.1, "share of the operations that write")
	flag.IntVar(&o.Keys, "keys", 1000, "rows read and written")
	flag.DurationVar(&timeout, "timeout", time.Hour, "give up after this long")
	flag.Parse()
	for _, e := range strings.Split(engines, ",") {
		o.Engines = append(o.Engines, strings.TrimSpace(e))
	}
	for _, p := range strings.Split(processes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "fleet: -processes: %q is not a positive number\n", p)
			os.Exit(2)
		}
		o.Processes = append(o.Processes, n)
	}
	o.Progress = os.Stderr
	var results []workload.FleetResult
	took, err := workload.RunCommand(timeout, func(ctx context.Context) (err error) {
		results, err = workload.RunFleet(ctx, o)
		return err
	})
	printTable(os.Stdout, o.WithDefaults(), results)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "total wall time %v\n", took.Round(time.Second))
}

func printTable(w io.Writer, o workload.FleetOptions, results []workload.FleetResult) {
	if len(results) == 0 {
		return
	}
	fmt.Fprintf(w, "Fleet: warm-up %v, idle phase %v, active phase %v at %g ops/s over the fleet (%.0f%% writes, %d rows); each process GOMAXPROCS=1, the plugin's default Config. Queries counted at a relay in front of each server; Redis calls from INFO commandstats; CPU of the fleet's processes from /proc; the machine's 1-minute load average at the phase's end.\n\n",
		o.Warmup, o.Idle, o.Active, o.Rate, 100*o.WriteFraction, o.Keys)
	fmt.Fprintln(w, "| engine | processes | phase | primary q/s | replica q/s | MariaDB Questions/s (primary, replica) | Redis commands/s | CPU (cores, per process) | ops/s | reads on replicas | stale reads | errors | read p50 / p99 | load average |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		var replicas, questions []string
		for i, s := range r.Servers {
			if i > 0 {
				replicas = append(replicas, fmt.Sprintf("%.1f", r.PerSecond(s.Queries)))
			}
			if s.Questions >= 0 {
				questions = append(questions, fmt.Sprintf("%.1f", r.PerSecond(s.Questions)))
			}
		}
		q := "–"
		if len(questions) > 0 {
			q = strings.Join(questions, ", ")
		}
		ops, share, stale, errs, lat := "–", "–", "–", "–", "–"
		if r.Phase == workload.PhaseActive {
			ops = fmt.Sprintf("%.0f", r.PerSecond(r.Reads+r.Writes))
			share = fmt.Sprintf("%.1f %%", 100*r.ReplicaShare())
			stale = strconv.FormatInt(r.StaleReads, 10)
			errs = strconv.FormatInt(r.Errors, 10)
			lat = fmt.Sprintf("%.1f / %.1f ms", ms(r.ReadP50), ms(r.ReadP99))
		}
		fmt.Fprintf(w, "| %s | %d | %s | %.1f | %s | %s | %.1f | %.3f, %.4f | %s | %s | %s | %s | %s | %s |\n",
			r.Engine, r.Processes, r.Phase, r.PerSecond(r.Servers[0].Queries), strings.Join(replicas, ", "), q,
			r.PerSecond(r.RedisCalls), r.CPU.Seconds()/r.Elapsed.Seconds(), r.CPUPerProcess(), ops, share, stale, errs, lat, r.LoadAvg)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Redis commands/s by command:")
	fmt.Fprintln(w)
	for _, r := range results {
		fmt.Fprintf(w, "- %s, %d processes, %s: %s\n", r.Engine, r.Processes, r.Phase, workload.FormatCommands(r.RedisByCommand, r.Elapsed))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
