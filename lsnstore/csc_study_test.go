package lsnstore

// The client-side caching study (docs/measurements/benchmarks.md,
// "Client-side caching (RESP3 CLIENT TRACKING): the window it opens"). It
// measures what go-redis's server-assisted client-side cache would do to
// the position lookups: how often a reader whose cached client was told,
// after a writer's raise returned, reads the old position, and for how long.
//
// It runs only with FRESHREAD_CSC_STUDY=1 and a redis-server binary (on
// PATH or /usr/bin/redis-server), which it starts itself on a free
// loopback port without persistence. FRESHREAD_CSC_TRIALS sets the number
// of trials of each case (default 100000); FRESHREAD_CSC_CASES, a
// comma-separated list, selects cases by name.

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// cscStudyRedis starts a redis-server of the study's own and returns its
// address, or skips the test.
func cscStudyRedis(tb testing.TB) string {
	tb.Helper()
	if os.Getenv("FRESHREAD_CSC_STUDY") != "1" {
		tb.Skip("client-side caching study: set FRESHREAD_CSC_STUDY=1 to run it")
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if _, serr := os.Stat("/usr/bin/redis-server"); serr != nil {
			tb.Skip("client-side caching study: no redis-server")
		}
		bin = "/usr/bin/redis-server"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := "127.0.0.1:" + port
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c.Ping(context.Background()).Err() == nil {
			return addr
		}
		if time.Now().After(deadline) {
			tb.Fatal("redis-server did not answer within 10s")
		}
	}
}

// cscOptions are the options of a reader's client with client-side caching
// (cfg nil: without).
func cscOptions(addr string, cfg *redis.ClientSideCacheConfig, poolSize int) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		Protocol:              3,
		PoolSize:              poolSize,
		ContextTimeoutEnabled: true,
		ClientSideCacheConfig: cfg,
	}
}

var cscTables = []string{"orders"}

// cscResult is one case's outcome.
type cscResult struct {
	trials     int
	firstHits  int             // trials whose first read was a cache hit
	stale      int             // trials whose first read returned the old position
	windows    []time.Duration // per stale trial: ack to the first fresh read
	polls      int             // reads made while stale (after the first)
	pollTime   time.Duration   // time those reads spanned
	readErrors int
	elapsed    time.Duration
}

func (r cscResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "trials=%d first-read-cache-hits=%d stale=%d (%.2f%%)",
		r.trials, r.firstHits, r.stale, 100*float64(r.stale)/float64(max(r.trials, 1)))
	if len(r.windows) > 0 {
		w := slices.Clone(r.windows)
		slices.Sort(w)
		q := func(p float64) time.Duration { return w[min(len(w)-1, int(p*float64(len(w))))] }
		fmt.Fprintf(&b, " window p50=%v p99=%v max=%v", q(0.50).Round(time.Microsecond),
			q(0.99).Round(time.Microsecond), w[len(w)-1].Round(time.Microsecond))
	}
	if r.polls > 0 {
		fmt.Fprintf(&b, " poll-interval=%v", (r.pollTime / time.Duration(r.polls)).Round(time.Microsecond))
	}
	fmt.Fprintf(&b, " read-errors=%d elapsed=%v", r.readErrors, r.elapsed.Round(time.Millisecond))
	return b.String()
}

// cscTrials runs n trials: the writer (a, its own client) raises the
// table's position to one more than before; when Raise has returned it
// tells the reader's goroutine over a channel, with the time of the ack;
// the reader reads the position through b (fence, if not nil, runs
// first), and while it reads the old one reads again
// until it reads the new one, yielding the processor between reads
// (runtime.Gosched: a timer sleep is about 1ms here, too coarse for the
// window). Before each raise the writer sleeps a random time in [0, 6ms),
// so that raises fall at random phases of the cache's 1 to 5ms drain
// ticker, as independent writes do (back to back, each raise would follow
// the tick that ended the previous trial). Before the first trial the reader reads the
// position once, so its cache (if any) holds it; the read that ends a
// trial fills the cache again.
func cscTrials(t *testing.T, a, b *Redis, stats func() redis.CSCStats, fence func(context.Context) error, n int) cscResult {
	t.Helper()
	ctx := context.Background()
	type trial struct {
		want Position
		ack  time.Time
	}
	type outcome struct {
		stale, hit bool
		window     time.Duration
		polls      int
		pollTime   time.Duration
		errs       int
	}
	read := func() (Position, error) {
		if fence != nil {
			if err := fence(ctx); err != nil {
				return Position{}, err
			}
		}
		return b.WritePosition(ctx, cscTables)
	}
	var lsn LSN = 1
	if err := a.Raise(ctx, cscTables, PositionOf(lsn)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		p, err := read()
		if err == nil && p.Covers(PositionOf(lsn)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reader never read the first position: %v %v", p, err)
		}
		time.Sleep(time.Millisecond)
	}
	reqs := make(chan trial)
	outs := make(chan outcome)
	go func() {
		for tr := range reqs {
			var o outcome
			before := stats().Hits
			var pollStart time.Time
			for i := 0; ; i++ {
				p, err := read()
				if i == 0 {
					o.hit = stats().Hits > before
				}
				if err != nil {
					o.errs++
				} else if p.Covers(tr.want) {
					if i > 0 {
						o.window = time.Since(tr.ack)
						o.pollTime = time.Since(pollStart)
					}
					break
				}
				if i == 0 {
					o.stale = err == nil
					pollStart = time.Now()
				} else {
					o.polls++
				}
				if time.Since(tr.ack) > 10*time.Second {
					o.errs++
					break
				}
				runtime.Gosched()
			}
			outs <- o
		}
	}()
	defer close(reqs)
	var res cscResult
	start := time.Now()
	for range n {
		time.Sleep(time.Duration(rand.Int64N(int64(6 * time.Millisecond))))
		lsn++
		want := PositionOf(lsn)
		if err := a.Raise(ctx, cscTables, want); err != nil {
			t.Fatal(err)
		}
		reqs <- trial{want: want, ack: time.Now()}
		o := <-outs
		res.trials++
		if o.hit {
			res.firstHits++
		}
		if o.stale {
			res.stale++
			res.windows = append(res.windows, o.window)
			res.polls += o.polls
			res.pollTime += o.pollTime
		}
		res.readErrors += o.errs
	}
	res.elapsed = time.Since(start)
	return res
}

// cscLoad runs n goroutines of INCR on keys of their own through c until
// the returned stop is called.
func cscLoad(c *redis.Client, n int) (stop func() int64) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ops atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "load-" + strconv.Itoa(i)
			for ctx.Err() == nil {
				if c.Incr(ctx, key).Err() == nil {
					ops.Add(1)
				}
			}
		}()
	}
	return func() int64 { cancel(); wg.Wait(); return ops.Load() }
}

func cscTrialCount(t *testing.T) int {
	n := 100000
	if s := os.Getenv("FRESHREAD_CSC_TRIALS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("FRESHREAD_CSC_TRIALS=%q", s)
		}
		n = v
	}
	return n
}

func cscCaseSelected(name string) bool {
	s := os.Getenv("FRESHREAD_CSC_CASES")
	return s == "" || slices.Contains(strings.Split(s, ","), name)
}

// TestCSCWindow measures the staleness window of a cached reader, per case:
//
//	nocache        the reader without client-side caching (the control: never stale)
//	idle           the cache with go-redis's defaults (DrainInterval 5ms)
//	idle-drain1ms  DrainInterval 1ms, the smallest go-redis accepts
//	load           defaults, 32 goroutines of INCR through the reader's client
//	load-other     defaults, 32 goroutines of INCR through another client
//	fence-ping     PoolSize 1 and a PING before every read (the only fence)
func TestCSCWindow(t *testing.T) {
	addr := cscStudyRedis(t)
	n := cscTrialCount(t)
	writer := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { writer.Close() })
	cases := []struct {
		name     string
		cfg      *redis.ClientSideCacheConfig
		poolSize int
		load     int
		other    bool
		fence    bool
	}{
		{name: "nocache"},
		{name: "idle", cfg: &redis.ClientSideCacheConfig{}},
		{name: "idle-drain1ms", cfg: &redis.ClientSideCacheConfig{DrainInterval: time.Millisecond}},
		{name: "load", cfg: &redis.ClientSideCacheConfig{}, load: 32},
		{name: "load-other", cfg: &redis.ClientSideCacheConfig{}, load: 32, other: true},
		{name: "fence-ping", cfg: &redis.ClientSideCacheConfig{}, poolSize: 1, fence: true},
	}
	for _, tc := range cases {
		if !cscCaseSelected(tc.name) {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			db := uniqueDB("csc")
			a := newTestRedis(writer, RedisOptions{Database: db})
			rc := redis.NewClient(cscOptions(addr, tc.cfg, tc.poolSize))
			defer rc.Close()
			b := newTestRedis(rc, RedisOptions{Database: db})
			var fence func(context.Context) error
			if tc.fence {
				fence = func(ctx context.Context) error { return rc.Ping(ctx).Err() }
			}
			var stop func() int64
			if tc.load > 0 {
				lc := rc
				if tc.other {
					lc = redis.NewClient(&redis.Options{Addr: addr, Protocol: 3, ContextTimeoutEnabled: true})
					defer lc.Close()
				}
				stop = cscLoad(lc, tc.load)
			}
			res := cscTrials(t, a, b, rc.CSCStats, fence, n)
			var loadOps int64
			if stop != nil {
				loadOps = stop()
			}
			t.Logf("%s: %v load-ops/s=%.0f cache=%+v", tc.name, res,
				float64(loadOps)/res.elapsed.Seconds(), rc.CSCStats())
			if tc.cfg == nil || tc.fence {
				if res.stale > 0 {
					t.Errorf("%s: %d stale first reads, want 0", tc.name, res.stale)
				}
			}
		})
	}
}

// freezeProxy forwards loopback connections to a target; while frozen it
// holds everything the target sends (the client sees a silent, open
// connection: a partition, not a reset).
type freezeProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cond   *sync.Cond
	frozen bool
	conns  []net.Conn
}

func newFreezeProxy(tb testing.TB, target string) *freezeProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &freezeProxy{ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	go p.accept()
	tb.Cleanup(p.close)
	return p
}

func (p *freezeProxy) addr() string { return p.ln.Addr().String() }

func (p *freezeProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); s.Close(); c.Close() }()
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := s.Read(buf)
				p.mu.Lock()
				for p.frozen {
					p.cond.Wait()
				}
				p.mu.Unlock()
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			c.Close()
			s.Close()
		}()
	}
}

func (p *freezeProxy) setFrozen(f bool) {
	p.mu.Lock()
	p.frozen = f
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *freezeProxy) close() {
	p.setFrozen(false)
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

// TestCSCPartition: the reader's connections go silent (a partition that
// resets nothing) while a writer, still connected, raises the position.
// It counts, for freezeFor, the reader's reads that return the old
// position, per case: without the cache, with it, and with MaxStaleness.
func TestCSCPartition(t *testing.T) {
	addr := cscStudyRedis(t)
	writer := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { writer.Close() })
	const freezeFor = 2 * time.Second
	for _, tc := range []struct {
		name string
		cfg  *redis.ClientSideCacheConfig
	}{
		{"nocache", nil},
		{"cache", &redis.ClientSideCacheConfig{}},
		{"cache-maxstaleness100ms", &redis.ClientSideCacheConfig{MaxStaleness: 100 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			px := newFreezeProxy(t, addr)
			db := uniqueDB("csc-partition")
			a := newTestRedis(writer, RedisOptions{Database: db})
			rc := redis.NewClient(cscOptions(px.addr(), tc.cfg, 0))
			defer rc.Close()
			// The store's production timeout (50ms), not the tests' 5s.
			b := NewRedis(rc, RedisOptions{Database: db})
			old := PositionOf(10)
			if err := a.Raise(ctx, cscTables, old); err != nil {
				t.Fatal(err)
			}
			// Fill the cache, with the tests' timeout (the first read dials).
			fill := newTestRedis(rc, RedisOptions{Database: db})
			for range 3 {
				if _, err := fill.WritePosition(ctx, cscTables); err != nil {
					t.Fatal(err)
				}
			}
			px.setFrozen(true)
			if err := a.Raise(ctx, cscTables, PositionOf(20)); err != nil {
				t.Fatal(err)
			}
			ack := time.Now()
			var reads, stale, errs int
			var lastStale time.Duration
			for time.Since(ack) < freezeFor {
				p, err := b.WritePosition(ctx, cscTables)
				reads++
				switch {
				case err != nil:
					errs++
				case !p.Covers(PositionOf(20)):
					stale++
					lastStale = time.Since(ack)
				}
				time.Sleep(time.Millisecond)
			}
			px.setFrozen(false)
			t.Logf("%s: frozen %v after the raise: reads=%d stale=%d errors=%d last-stale-read-at=%v",
				tc.name, freezeFor, reads, stale, errs, lastStale.Round(time.Millisecond))
			if tc.cfg == nil && stale > 0 {
				t.Errorf("without the cache %d reads were stale", stale)
			}
		})
	}
}

// BenchmarkCSCRead: one position lookup of three tables (the MGET of
// WritePosition), uncached, from go-redis's client-side cache (a hit), and
// with the PING fence before the hit.
func BenchmarkCSCRead(b *testing.B) {
	addr := cscStudyRedis(b)
	ctx := context.Background()
	for _, bc := range []struct {
		name  string
		cfg   *redis.ClientSideCacheConfig
		pool  int
		fence bool
	}{
		{"mget", nil, 0, false},
		{"cached", &redis.ClientSideCacheConfig{}, 0, false},
		{"ping-fenced-cached", &redis.ClientSideCacheConfig{}, 1, true},
		{"ping", nil, 0, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rc := redis.NewClient(cscOptions(addr, bc.cfg, bc.pool))
			defer rc.Close()
			s := NewRedis(rc, RedisOptions{Database: uniqueDB("csc-bench")})
			if err := s.Raise(ctx, benchTables, PositionOf(100)); err != nil {
				b.Fatal(err)
			}
			read := func() error {
				if bc.fence {
					if err := rc.Ping(ctx).Err(); err != nil {
						return err
					}
					if bc.cfg == nil {
						return nil // the PING alone
					}
				}
				_, err := s.WritePosition(ctx, benchTables)
				return err
			}
			if err := read(); err != nil {
				b.Fatal(err)
			}
			before := rc.CSCStats()
			b.ReportAllocs()
			for b.Loop() {
				if err := read(); err != nil {
					b.Fatal(err)
				}
			}
			after := rc.CSCStats()
			if bc.cfg != nil && b.N > 0 {
				b.ReportMetric(float64(after.Hits-before.Hits)/float64(b.N), "hits/op")
			}
		})
	}
}
