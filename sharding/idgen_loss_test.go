package sharding

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// The tests of this file: a generator A mints with a leased worker ID w,
// Redis loses the lease (restart without persistence, FLUSHALL, failover
// to a replica that missed it) or A stops answering (SIGSTOP), a second
// generator B, with its own client, leases w while A may still mint, and
// both keep minting until A has leased again. Every ID either returned
// is collected: none may repeat.

// holdHook holds every command of the client it is added to while held
// is set: a network that stalls the holder's renewals.
type holdHook struct{ held atomic.Bool }

func (h *holdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for h.held.Load() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		return next(ctx, cmd)
	}
}

func (h *holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// minting mints with g on four route codes from four goroutines until
// stopped, keeping every ID and counting ErrLeaseLost.
type minting struct {
	g      *IDGenerator
	stop   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	ids    [][]int64 // per goroutine, in minting order
	n      atomic.Int64
	paused atomic.Int64 // ErrLeaseLost answers
	err    atomic.Pointer[error]
}

func startMinting(g *IDGenerator) *minting {
	m := &minting{g: g, stop: make(chan struct{}), ids: make([][]int64, 4)}
	for k := range m.ids {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			var out []int64
			defer func() { m.mu.Lock(); m.ids[k] = out; m.mu.Unlock() }()
			for {
				select {
				case <-m.stop:
					return
				default:
				}
				for r := 0; r < 4; r++ {
					for j := 0; j < 4; j++ {
						id, err := g.Next(r)
						switch {
						case err == nil:
							out = append(out, id)
							m.n.Add(1)
						case errors.Is(err, ErrLeaseLost):
							m.paused.Add(1)
						default:
							m.err.Store(&err)
							return
						}
					}
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	return m
}

func (m *minting) finish(t *testing.T) [][]int64 {
	t.Helper()
	close(m.stop)
	m.wg.Wait()
	if e := m.err.Load(); e != nil {
		t.Fatalf("mint: %v", *e)
	}
	return m.ids
}

// checkUnique fails t when an ID repeats across the lists, or when a list
// (one goroutine's or one process's, in minting order) is not strictly
// increasing per route code. It returns how many IDs it checked.
func checkUnique(t *testing.T, lists ...[]int64) int {
	t.Helper()
	seen := map[int64]struct{}{}
	dups := 0
	for li, ids := range lists {
		last := map[int]int64{}
		for _, id := range ids {
			if _, dup := seen[id]; dup {
				if dups++; dups <= 5 {
					d, _ := DecodeID(id)
					t.Errorf("duplicate ID %d (%+v)", id, d)
				}
			}
			seen[id] = struct{}{}
			d, _ := DecodeID(id)
			route := d.Bucket
			if prev, ok := last[route]; ok && id <= prev {
				t.Errorf("list %d: ID %d after %d for route %d: not increasing", li, id, prev, route)
			}
			last[route] = id
		}
	}
	if dups > 0 {
		t.Fatalf("%d duplicate IDs among %d", dups, len(seen)+dups)
	}
	return len(seen)
}

// fillWorkers leases every worker ID but keep under a foreign token, so
// the next generator gets keep; the returned function frees them.
func fillWorkers(t *testing.T, ctx context.Context, rdb redis.UniversalClient, keyOf func(int) string, keep int) func() {
	t.Helper()
	for i := 0; i < MaxWorkers; i++ {
		if i != keep {
			if err := rdb.Set(ctx, keyOf(i), "filler", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return func() {
		for i := 0; i < MaxWorkers; i++ {
			if i != keep {
				rdb.Del(ctx, keyOf(i))
			}
		}
	}
}

// waitUntil polls ok every 20 ms until it holds or ctx ends.
func waitUntil(t *testing.T, ctx context.Context, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func redisOn(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// lossCase runs the scenario of the file. newClient makes a client of
// the deployment (each generator its own); fault makes Redis lose A's
// lease while A's renewals are held; admin is a client for the fillers
// after the fault.
type lossCase struct {
	ttl       time.Duration
	newClient func() redis.UniversalClient
	fault     func(ctx context.Context)
}

func (c lossCase) run(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := "test:" + t.Name()
	hold := &holdHook{}
	ca := c.newClient()
	ca.AddHook(hold)
	a, err := NewIDGenerator(ctx, IDConfig{Redis: ca, Prefix: prefix, LeaseTTL: c.ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	w := a.Worker()
	ma := startMinting(a)
	waitUntil(t, ctx, "A mints", func() bool { return ma.n.Load() > 1000 })
	// A's renewals stall from now on: A keeps minting on its lease until
	// 0.9 TTL after its last renewal, as when its renewals are slow.
	hold.held.Store(true)
	faultAt := time.Now().Truncate(time.Millisecond)
	c.fault(ctx)
	cb := c.newClient()
	free := fillWorkers(t, ctx, cb, a.workerKey, w)
	b, err := NewIDGenerator(ctx, IDConfig{Redis: cb, Prefix: prefix, LeaseTTL: c.ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Worker() != w {
		t.Fatalf("B leased worker %d, want A's %d", b.Worker(), w)
	}
	t.Logf("B leased worker %d after the loss; A minted %d IDs so far", w, ma.n.Load())
	mb := startMinting(b)
	free()
	hold.held.Store(false)
	// A notices at its next renewal, leases another worker ID, waits out
	// its possible previous holder and mints again.
	waitUntil(t, ctx, "A leases again", func() bool { wa := a.Worker(); return wa >= 0 && wa != w })
	na := ma.n.Load()
	waitUntil(t, ctx, "both mint", func() bool { return ma.n.Load() > na+1000 && mb.n.Load() > 1000 })
	idsA, idsB := ma.finish(t), mb.finish(t)
	// A's IDs with w from the fault on: minted on a lease Redis no
	// longer had.
	late := 0
	for _, ids := range idsA {
		for _, id := range ids {
			if d, _ := DecodeID(id); d.Worker == w && !d.Time.Before(faultAt) {
				late++
			}
		}
	}
	n := checkUnique(t, append(idsA, idsB...)...)
	t.Logf("%d IDs, no duplicate (A: %d, %d of them with worker %d from the fault on; B: %d; A answered ErrLeaseLost %d times, B %d)",
		n, ma.n.Load(), late, w, mb.n.Load(), ma.paused.Load(), mb.paused.Load())
}

const lossTTL = 3 * time.Second

// TestIDGenRedisRestartNoDuplicate: Redis restarts without persistence
// while A mints.
func TestIDGenRedisRestartNoDuplicate(t *testing.T) {
	r := testcluster.RedisWithArgsFor(t)
	lossCase{
		ttl:       lossTTL,
		newClient: func() redis.UniversalClient { return redisOn(t, r.Addr()) },
		fault: func(ctx context.Context) {
			if err := r.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if err := r.Start(ctx); err != nil {
				t.Fatal(err)
			}
		},
	}.run(t)
}

// TestIDGenFlushAllNoDuplicate: FLUSHALL while A mints.
func TestIDGenFlushAllNoDuplicate(t *testing.T) {
	r := testcluster.RedisWithArgsFor(t)
	admin := redisOn(t, r.Addr())
	lossCase{
		ttl:       lossTTL,
		newClient: func() redis.UniversalClient { return redisOn(t, r.Addr()) },
		fault: func(ctx context.Context) {
			if err := admin.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		},
	}.run(t)
}

// TestIDGenSentinelFailoverNoDuplicate: the master is killed (or failed
// over by a sentinel) while its replica's replication is stalled; the
// promoted replica has the worker's epoch (replicated before the stall)
// but not A's lease. A first generator leased w and released it, so
// that its epoch and the fillers reached the replica. The lease (8 s) is
// longer than a failover takes here (the sentinels wait 1.5 s before
// they call the master down), so A still mints on its lease when B
// leases w.
func TestIDGenSentinelFailoverNoDuplicate(t *testing.T) {
	const ttl = 8 * time.Second
	for _, tc := range []struct {
		name  string
		fault func(*testcluster.RedisSentinel, context.Context) (string, error)
	}{
		{"Kill", (*testcluster.RedisSentinel).KillMaster},
		{"Coordinated", (*testcluster.RedisSentinel).Failover},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testcluster.RedisSentinelFor(t)
			newClient := func() redis.UniversalClient {
				c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testcluster.SentinelMaster,
					SentinelAddrs: s.SentinelAddrs(), ContextTimeoutEnabled: true, DialTimeout: time.Second})
				t.Cleanup(func() { c.Close() })
				return c
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			admin := newClient()
			g0, err := NewIDGenerator(ctx, IDConfig{Redis: admin, Prefix: "test:" + t.Name(), LeaseTTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			w := g0.Worker()
			g0.Close()
			fillWorkers(t, ctx, admin, g0.workerKey, w)
			if err := admin.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
				t.Fatal(err)
			}
			s.StallReplication(true)
			lossCase{
				ttl:       ttl,
				newClient: newClient,
				fault: func(ctx context.Context) {
					if _, err := tc.fault(s, ctx); err != nil {
						t.Fatal(err)
					}
				},
			}.run(t)
		})
	}
}

// Environment of the child process of TestIDGenPausedHolderNoDuplicate.
const (
	envChildAddr   = "FRESHREAD_IDGEN_CHILD_ADDR"
	envChildPrefix = "FRESHREAD_IDGEN_CHILD_PREFIX"
)

// TestIDGenChild is the child process of
// TestIDGenPausedHolderNoDuplicate (skipped otherwise): it mints with a
// leased worker ID until its standard input closes, printing "id <ID>"
// for every ID Next returned.
func TestIDGenChild(t *testing.T) {
	addr := os.Getenv(envChildAddr)
	if addr == "" {
		t.Skip("the child process of TestIDGenPausedHolderNoDuplicate")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := NewIDGenerator(ctx, IDConfig{Redis: rdb, Prefix: os.Getenv(envChildPrefix), LeaseTTL: lossTTL})
	if err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		done.Store(true)
	}()
	out := bufio.NewWriter(os.Stdout)
	for !done.Load() {
		for r := 0; r < 4; r++ {
			for j := 0; j < 4; j++ {
				id, err := g.Next(r)
				if err == nil {
					fmt.Fprintf(out, "id %d\n", id)
				} else if !errors.Is(err, ErrLeaseLost) {
					t.Fatal(err)
				}
			}
		}
		out.Flush()
		time.Sleep(time.Millisecond)
	}
	out.Flush()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestIDGenPausedHolderNoDuplicate: a child process mints with worker w
// and is stopped (SIGSTOP) past the lease TTL; B leases w and mints; the
// child is continued (SIGCONT), must not mint with w again, and leases
// another worker ID. Every ID of both is compared.
func TestIDGenPausedHolderNoDuplicate(t *testing.T) {
	r := testcluster.RedisWithArgsFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := "test:" + t.Name()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestIDGenChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChildAddr+"="+r.Addr(), envChildPrefix+"="+prefix)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		childIDs []int64
		other    strings.Builder // the child's lines that are not IDs
	)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "id "); ok {
				if id, err := strconv.ParseInt(v, 10, 64); err == nil {
					mu.Lock()
					childIDs = append(childIDs, id)
					mu.Unlock()
					continue
				}
			}
			other.WriteString(line + "\n")
		}
	}()
	count := func() (int, int64) {
		mu.Lock()
		defer mu.Unlock()
		if len(childIDs) == 0 {
			return 0, 0
		}
		return len(childIDs), childIDs[len(childIDs)-1]
	}
	waitUntil(t, ctx, "the child mints", func() bool { n, _ := count(); return n > 1000 })
	_, last := count()
	d, _ := DecodeID(last)
	w := d.Worker
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// What the child wrote before it stopped is read once the count no
	// longer moves.
	nStopped, _ := count()
	for {
		time.Sleep(200 * time.Millisecond)
		n, _ := count()
		if n == nStopped {
			break
		}
		nStopped = n
	}
	rdb := redisOn(t, r.Addr())
	probe := &IDGenerator{cfg: IDConfig{Prefix: prefix}}
	free := fillWorkers(t, ctx, rdb, probe.workerKey, w)
	// w's lease expires on the server one TTL after the child's last
	// renewal.
	var b *IDGenerator
	waitUntil(t, ctx, "B leases the stopped child's worker ID", func() bool {
		g, err := NewIDGenerator(ctx, IDConfig{Redis: rdb, Prefix: prefix, LeaseTTL: lossTTL})
		if errors.Is(err, ErrNoWorker) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		b = g
		return true
	})
	defer b.Close()
	if b.Worker() != w {
		t.Fatalf("B leased %d, want %d", b.Worker(), w)
	}
	t.Logf("B leased worker %d %v after the child was stopped", w, time.Since(stopped).Round(time.Millisecond))
	mb := startMinting(b)
	waitUntil(t, ctx, "B mints", func() bool { return mb.n.Load() > 1000 })
	free()
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The child leases another worker ID and mints with it.
	waitUntil(t, ctx, "the continued child mints with another worker ID", func() bool {
		n, last := count()
		d, _ := DecodeID(last)
		return n > nStopped && d.Worker != w
	})
	n0, _ := count()
	waitUntil(t, ctx, "the child mints more", func() bool { n, _ := count(); return n > n0+1000 })
	stdin.Close()
	<-read
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s\n%s", err, other.String(), stderr.String())
	}
	idsB := mb.finish(t)
	mu.Lock()
	defer mu.Unlock()
	afterW := 0
	for _, id := range childIDs[nStopped:] {
		if d, _ := DecodeID(id); d.Worker == w {
			afterW++
		}
	}
	n := checkUnique(t, append(idsB, childIDs)...)
	t.Logf("%d IDs, no duplicate (child %d, %d of them after SIGCONT, %d of those with worker %d; B %d)",
		n, len(childIDs), len(childIDs)-nStopped, afterW, w, mb.n.Load())
}
