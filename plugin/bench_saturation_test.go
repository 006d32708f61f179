//go:build unix

package plugin_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/freshreadprom"
	"github.com/freshread/freshread/plugin"
)

// BenchmarkReadSaturation is the closed loop of a saturated machine: 8, 32
// and 128 goroutines read bench_items rows by primary key as fast as they
// can (mix=reads), or write one operation in ten (mix=writes10: an UPDATE
// of a random row's version, acknowledged once it returns). Run it for a
// fixed time:
//
//	go test -run '^$' -bench ReadSaturation -benchtime 20s ./plugin/
//
// Besides ns/op it reports reads/s; for freshread the share of reads
// served by replicas and the reads sent to the primary by reason (counts
// over the run, from freshread_decisions_total); stale reads (a read that
// returned a version older than one acknowledged before it started:
// counted, never expected of freshread); the process's CPU time per read
// (client-cpu-µs/read, getrusage) and, with Redis, the Redis server's
// (redis-cpu-µs/read, INFO cpu). freshread-memory-nostall is
// freshread-memory with StallTimeout -1: what the stall watch costs.
func BenchmarkReadSaturation(b *testing.B) {
	for _, mix := range []string{"reads", "writes10"} {
		for _, conc := range []int{8, 32, 128} {
			for _, kind := range []string{"primary", "dbresolver", "freshread-memory", "freshread-memory-nostall", "freshread-redis", "freshread-redis-table"} {
				b.Run(fmt.Sprintf("mix=%s/conc=%d/setup=%s", mix, conc, kind), func(b *testing.B) {
					saturate(b, kind, conc, mix == "writes10", context.Background())
				})
			}
		}
	}
}

// BenchmarkReadSaturationRequestContext is BenchmarkReadSaturation's
// reads-only mix in a context that can end, as a service's request
// context: database/sql and the driver then watch every read's context
// whatever the setup, so the stall watch's own context adds less than in
// one that cannot end (docs/design/reliability.md).
func BenchmarkReadSaturationRequestContext(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, conc := range []int{8, 32, 128} {
		for _, kind := range []string{"dbresolver", "freshread-memory", "freshread-memory-nostall", "freshread-redis"} {
			b.Run(fmt.Sprintf("conc=%d/setup=%s", conc, kind), func(b *testing.B) {
				saturate(b, kind, conc, false, ctx)
			})
		}
	}
}

// saturate runs the closed loop of conc goroutines on setup kind, its
// reads in a context derived from parent.
func saturate(b *testing.B, kind string, conc int, writes bool, parent context.Context) {
	s, db := readSetup(b, kind, parent, false)
	// acked[i] is the highest version of row i+1 a write returned.
	var acked [benchRows]atomic.Int64
	var reads, stale atomic.Int64
	before := decisionCounts(b, s.plugin)
	cpu := processCPU()
	redisCPU := serverCPU(b, s.redisAddr)
	start := time.Now()
	b.ResetTimer()
	b.SetParallelism(max(1, conc/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		for pb.Next() {
			row := rng.IntN(benchRows)
			id := row + 1
			if writes && rng.IntN(10) == 0 {
				var v int64
				if err := db.Raw("UPDATE bench_items SET version = version + 1 WHERE id = ? RETURNING version", id).Scan(&v).Error; err != nil {
					b.Error(err)
					return
				}
				for old := acked[row].Load(); v > old && !acked[row].CompareAndSwap(old, v); old = acked[row].Load() {
				}
				continue
			}
			want := acked[row].Load()
			var it benchItem
			if err := db.Model(&benchItem{}).Where("id = ?", id).Take(&it).Error; err != nil {
				b.Error(err)
				return
			}
			reads.Add(1)
			if int64(it.Version) < want {
				stale.Add(1)
			}
		}
	})
	b.StopTimer()
	elapsed := time.Since(start)
	n := float64(max(reads.Load(), 1))
	b.ReportMetric(float64(reads.Load())/elapsed.Seconds(), "reads/s")
	b.ReportMetric(float64(stale.Load()), "stale-reads")
	b.ReportMetric((processCPU()-cpu).Seconds()*1e6/n, "client-cpu-µs/read")
	if s.redisAddr != "" {
		b.ReportMetric((serverCPU(b, s.redisAddr)-redisCPU).Seconds()*1e6/n, "redis-cpu-µs/read")
	}
	if s.plugin != nil {
		after := decisionCounts(b, s.plugin)
		var replica, all float64
		for k, v := range after {
			if k == "primary/"+string(plugin.ReasonWrite) {
				continue // writes are not reads
			}
			d := v - before[k]
			all += d
			if strings.HasPrefix(k, "replica/") {
				replica += d
			} else if d > 0 {
				b.ReportMetric(d, "primary-"+strings.TrimPrefix(k, "primary/"))
			}
		}
		if all > 0 {
			b.ReportMetric(100*replica/all, "replica-%")
		}
	}
	// After writes the plugin may be conservative for a while (a write it
	// could not publish): eventually back on a replica.
	deadline := time.Now().Add(10 * time.Second)
	for s.routesToReplica(b, db) != s.wantReplica {
		if time.Now().After(deadline) {
			s.check(b, db, "10 s after the loop")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// decisionCounts reads freshread_decisions_total by "target/reason".
func decisionCounts(b *testing.B, p *plugin.Plugin) map[string]float64 {
	b.Helper()
	out := map[string]float64{}
	if p == nil {
		return out
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(freshreadprom.Plugin(p)); err != nil {
		b.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "freshread_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var target, reason string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "target":
					target = l.GetValue()
				case "reason":
					reason = l.GetValue()
				}
			}
			out[target+"/"+reason] = m.GetCounter().GetValue()
		}
	}
	return out
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the Redis server's used_cpu_user + used_cpu_sys (INFO cpu);
// 0 without a server.
func serverCPU(b *testing.B, addr string) time.Duration {
	b.Helper()
	if addr == "" {
		return 0
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, l := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
