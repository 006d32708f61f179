package workload

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// EnvFleetChild makes a program that calls FleetChildMain run as one
// process of the fleet; it holds the process's specification (JSON).
const EnvFleetChild = "FRESHREAD_FLEET_CHILD"

// IsFleetChild reports whether this process was started as one of
// RunFleet's processes.
func IsFleetChild() bool { return os.Getenv(EnvFleetChild) != "" }

// fleetChildSpec is what a fleet process needs: every DSN goes through
// the servers' counting relays.
type fleetChildSpec struct {
	Index         int
	Engine        string
	Primary       string
	Replicas      []string
	Redis         string
	Database      string // the database, also the store's Database
	Keys          int
	WriteFraction float64
	Versions      string // the shared file of acknowledged versions
	PrimaryPort   int    // the primary server's own port (reads answer it)
}

// fleetChildStats is what a process reports after running its share of
// the active phase.
type fleetChildStats struct {
	Reads, Writes, Errors, ReplicaReads, StaleReads int64
	FirstError                                      string
	ReadLatencyMicros                               []int64
}

// FleetChildMain is the body of a fleet process (IsFleetChild): it opens
// GORM with the plugin's default Config (only Replicas and a Redis Store
// set), makes one read, prints "ready", then, for every line
// "run <ops/s> <nanoseconds>" on stdin, runs that many operations a second
// for that long and prints their figures as one JSON line; at the end of
// stdin it closes the plugin and returns the exit code.
func FleetChildMain() int {
	if err := runFleetChild(context.Background(), os.Getenv(EnvFleetChild)); err != nil {
		fmt.Fprintln(os.Stderr, "fleet process:", err)
		return 1
	}
	return 0
}

func runFleetChild(ctx context.Context, raw string) error {
	var spec fleetChildSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		return fmt.Errorf("%s: %w", EnvFleetChild, err)
	}
	versions, unmap, err := sharedVersions(spec.Versions, spec.Keys)
	if err != nil {
		return err
	}
	defer unmap()
	open := postgres.Open
	var cl cluster = pgCluster{}
	if spec.Engine == MariaDB {
		open, cl = mysql.Open, mariaCluster{}
	}
	db, err := gorm.Open(open(spec.Primary), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	rdb := redis.NewClient(&redis.Options{Addr: spec.Redis})
	defer rdb.Close()
	cfg := plugin.Config{Store: lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: spec.Database})}
	for i, dsn := range spec.Replicas {
		cfg.Replicas = append(cfg.Replicas, plugin.Replica{Name: fmt.Sprintf("replica%d", i), Dialector: open(dsn)})
	}
	p := plugin.New(cfg)
	if err := db.Use(p); err != nil {
		return err
	}
	defer p.Close()
	e := &env{
		o: Options{Engine: spec.Engine, Users: spec.Keys, Tables: 1, ReadFraction: 1 - spec.WriteFraction, OwnReads: 0.5}, cl: cl,
		strategy: FreshKey, db: db, primary: spec.PrimaryPort, acked: [][]atomic.Int64{versions},
	}
	if _, _, err := e.readRow(ctx, 0, spec.Index%spec.Keys+1); err != nil {
		return fmt.Errorf("first read: %w", err)
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for round := 0; in.Scan(); round++ {
		f := strings.Fields(in.Text())
		if len(f) != 3 || f[0] != "run" {
			return fmt.Errorf("unknown command %q", in.Text())
		}
		rate, err := strconv.ParseFloat(f[1], 64)
		if err != nil || rate <= 0 {
			return fmt.Errorf("rate %q: %v", f[1], err)
		}
		d, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return fmt.Errorf("duration %q: %w", f[2], err)
		}
		st := e.runRate(ctx, rate, time.Duration(d), uint64(spec.Index)<<20|uint64(round))
		b, err := json.Marshal(st)
		if err != nil {
			return err
		}
		fmt.Println(string(b))
	}
	return in.Err()
}

// opsInFlight bounds the operations one process runs at once: one per
// 10 ops/s of its rate, 2 to 8. A fleet of many slow processes must not
// open more connections than the servers allow when a loaded machine
// makes every operation slow (a hundred processes with 8 each did:
// MariaDB's "Too many connections" at 500).
func opsInFlight(rate float64) int { return int(min(8, max(2, math.Ceil(rate/10)))) }

// fleetOpTimeout bounds one operation: one that takes longer is counted
// as an error instead of holding the phase.
const fleetOpTimeout = 30 * time.Second

// runRate starts rate operations a second for d, the first at a random
// offset within the first interval (so that the fleet's processes do not
// start theirs in step), and returns their figures.
func (e *env) runRate(ctx context.Context, rate float64, d time.Duration, seed uint64) fleetChildStats {
	start := time.Now()
	deadline := start.Add(d)
	offset := time.Duration(rand.New(rand.NewPCG(seed, 0)).Float64() / rate * float64(time.Second))
	sem := make(chan struct{}, opsInFlight(rate))
	var (
		mu  sync.Mutex
		out fleetChildStats
		wg  sync.WaitGroup
	)
	for i := uint64(1); ; i++ {
		at := start.Add(offset + time.Duration(float64(i-1)/rate*float64(time.Second)))
		if !at.Before(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Until(at))
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var st workerStats
			octx, cancel := context.WithTimeout(ctx, fleetOpTimeout)
			e.op(octx, rand.New(rand.NewPCG(seed, i)), &st)
			cancel()
			mu.Lock()
			defer mu.Unlock()
			out.Reads += st.reads
			out.Writes += st.writes
			out.Errors += st.errs
			out.ReplicaReads += st.replica
			out.StaleReads += st.stale
			if st.firstErr != nil && out.FirstError == "" {
				out.FirstError = st.firstErr.Error()
			}
			for _, l := range st.lat {
				out.ReadLatencyMicros = append(out.ReadLatencyMicros, l.Microseconds())
			}
		})
	}
	wg.Wait()
	return out
}
