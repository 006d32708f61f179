package workload

import (
	"bufio"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// FleetOptions configures RunFleet. Zero fields take their defaults.
type FleetOptions struct {
	// Engines to run, in order: Postgres (primary + 2 replicas), MariaDB
	// (primary + 1 replica). Default: both.
	Engines []string
	// Processes lists the fleet sizes, each run in turn. Default 1, 10,
	// 100.
	Processes []int
	// Warmup is how long the fleet runs idle, once every process is
	// ready, before the idle phase is measured: longer than the plugin's
	// idle time (Config.IdleAfter, 5s by default) and its start. Default
	// 10s.
	Warmup time.Duration
	// Idle is the length of the idle phase (no reads, no writes).
	// Default 20s.
	Idle time.Duration
	// Active is the length of the active phase. Default 20s.
	Active time.Duration
	// Rate is the operations started per second during the active phase,
	// over the whole fleet (each process runs Rate/N). Default 200.
	Rate float64
	// WriteFraction is the share of operations that write. Default 0.1.
	WriteFraction float64
	// Keys is the number of rows read and written. Default 1000.
	Keys int
	// Binary is the program started once per process; it must call
	// FleetChildMain when IsFleetChild. Default: this program
	// (os.Executable).
	Binary string
	// Args are the Binary's arguments (a test binary's -test.run).
	Args []string
	// Progress, when set, receives a line per step.
	Progress io.Writer
}

func (o FleetOptions) withDefaults() FleetOptions {
	if len(o.Engines) == 0 {
		o.Engines = []string{Postgres, MariaDB}
	}
	if len(o.Processes) == 0 {
		o.Processes = []int{1, 10, 100}
	}
	if o.Warmup <= 0 {
		o.Warmup = 10 * time.Second
	}
	if o.Idle <= 0 {
		o.Idle = 20 * time.Second
	}
	if o.Active <= 0 {
		o.Active = 20 * time.Second
	}
	if o.Rate <= 0 {
		o.Rate = 200
	}
	if o.WriteFraction <= 0 || o.WriteFraction > 1 {
		o.WriteFraction = 0.1
	}
	if o.Keys <= 0 {
		o.Keys = 1000
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return o
}

// WithDefaults returns o with its zero fields set to their defaults, as
// RunFleet uses it.
func (o FleetOptions) WithDefaults() FleetOptions { return o.withDefaults() }

// The fleet's phases.
const (
	PhaseIdle   = "idle"
	PhaseActive = "active"
)

// ServerLoad is what one database server was asked during a phase, counted
// by a relay in front of it (testcluster.NewCountingRelay) that every
// connection of the fleet goes through.
type ServerLoad struct {
	Name    string // primary, replica0, …
	Queries int64  // statements: PostgreSQL 'Q' + 'E', MySQL COM_QUERY + COM_STMT_EXECUTE
	// Questions is the change of MariaDB's SHOW GLOBAL STATUS
	// 'Questions' over the phase, less the SHOW itself; -1 on
	// PostgreSQL.
	Questions int64
	Conns     int64 // connections opened during the phase
}

// FleetResult is one phase of one fleet size.
type FleetResult struct {
	Engine    string
	Processes int
	Phase     string
	Elapsed   time.Duration
	Servers   []ServerLoad
	// RedisCalls is the change of Redis's INFO commandstats calls over
	// the phase (every command of every client; the measurement's own
	// INFO removed); RedisByCommand the same per command.
	RedisCalls     int64
	RedisByCommand map[string]int64
	// CPU is the CPU time (user + system) the fleet's processes used
	// during the phase.
	CPU time.Duration
	// LoadAvg is the machine's 1-minute load average at the phase's end.
	LoadAvg string
	// The operations of the active phase.
	Reads, Writes, Errors, ReplicaReads, StaleReads int64
	ReadP50, ReadP99                                time.Duration
	FirstError                                      string
}

// PerSecond is n per second of the phase.
func (r FleetResult) PerSecond(n int64) float64 { return float64(n) / r.Elapsed.Seconds() }

// ReplicaShare is ReplicaReads/Reads.
func (r FleetResult) ReplicaShare() float64 { return ratio(r.ReplicaReads, r.Reads) }

// CPUPerProcess is the CPU share of one process: CPU seconds per second,
// divided by the number of processes.
func (r FleetResult) CPUPerProcess() float64 {
	return r.CPU.Seconds() / r.Elapsed.Seconds() / float64(max(r.Processes, 1))
}

// relayedServer is a server with the counting relay every fleet
// connection reaches it through.
type relayedServer struct {
	name   string
	relay  *testcluster.Relay
	direct string // DSN of the server itself (MariaDB's Questions)
}

// fleetCluster is an engine's servers behind counting relays.
type fleetCluster struct {
	cl      cluster
	servers []relayedServer // the primary first
}

func (f *fleetCluster) close() {
	for _, s := range f.servers {
		s.relay.Close()
	}
}

// openFleetCluster starts (or reuses) the engine's servers and puts a
// counting relay in front of each.
func openFleetCluster(engine string) (*fleetCluster, error) {
	cl, err := openCluster(engine)
	if err != nil {
		return nil, err
	}
	proto := testcluster.PostgresProtocol
	if engine == MariaDB {
		proto = testcluster.MySQLProtocol
	}
	f := &fleetCluster{cl: cl}
	add := func(name, dsn string) error {
		addr, err := dsnAddr(cl.driver(), dsn)
		if err != nil {
			return err
		}
		r, err := testcluster.NewCountingRelay(addr, proto)
		if err != nil {
			return err
		}
		f.servers = append(f.servers, relayedServer{name: name, relay: r, direct: dsn})
		return nil
	}
	if err := add("primary", cl.primaryDSN("")); err != nil {
		f.close()
		return nil, err
	}
	for i := range cl.replicas() {
		if err := add(fmt.Sprintf("replica%d", i), cl.replicaDSN(i, "")); err != nil {
			f.close()
			return nil, err
		}
	}
	return f, nil
}

// snapshot is the counters a phase's figures are differences of.
type fleetSnapshot struct {
	at        time.Time
	counts    []testcluster.Counts
	questions []int64
	redis     map[string]int64
	cpu       time.Duration
}

func (f *fleetCluster) snapshot(ctx context.Context, rdb *redis.Client, pids []int) (fleetSnapshot, error) {
	s := fleetSnapshot{at: time.Now()}
	for _, srv := range f.servers {
		s.counts = append(s.counts, srv.relay.Counts())
		q := int64(-1)
		if f.cl.driver() == "mysql" {
			var err error
			if q, err = mariaQuestions(ctx, srv.direct); err != nil {
				return s, err
			}
		}
		s.questions = append(s.questions, q)
	}
	var err error
	if s.redis, err = redisCommandStats(ctx, rdb); err != nil {
		return s, err
	}
	s.cpu, err = processesCPU(pids)
	return s, err
}

// mariaQuestions reads SHOW GLOBAL STATUS LIKE 'Questions' on a fresh
// connection (the SHOW counts itself).
func mariaQuestions(ctx context.Context, dsn string) (int64, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var name string
	var v int64
	if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &v); err != nil {
		return 0, fmt.Errorf("workload: Questions: %w", err)
	}
	return v, nil
}

// phaseResult is the difference of two snapshots.
func (f *fleetCluster) phaseResult(engine string, n int, phase string, a, b fleetSnapshot) FleetResult {
	r := FleetResult{Engine: engine, Processes: n, Phase: phase, Elapsed: b.at.Sub(a.at), CPU: b.cpu - a.cpu, LoadAvg: loadAvg()}
	for i, srv := range f.servers {
		d := b.counts[i].Sub(a.counts[i])
		q := int64(-1)
		if a.questions[i] >= 0 {
			q = b.questions[i] - a.questions[i] - 1
		}
		r.Servers = append(r.Servers, ServerLoad{Name: srv.name, Queries: d.Queries, Questions: q, Conns: d.Conns})
	}
	r.RedisByCommand, r.RedisCalls = subCommandStats(b.redis, a.redis)
	return r
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// RunFleet starts (or reuses) the process's shared testcluster servers of
// each engine and Redis, puts a counting relay in front of every database
// server, and for each fleet size N runs N processes, each opening GORM
// with the plugin's default Config (Replicas and a Redis Store) through
// the relays: once they are ready it waits Warmup, measures the idle
// phase, then runs Rate operations a second over the fleet for Active and
// measures that. The caller stops the servers (testcluster.Shutdown).
func RunFleet(ctx context.Context, opts FleetOptions) ([]FleetResult, error) {
	o := opts.withDefaults()
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("workload: fleet: %w", err)
		}
		o.Binary = exe
	}
	rs, err := testcluster.SharedRedis()
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), PoolSize: 1})
	defer rdb.Close()
	dir, err := os.MkdirTemp("", "freshread-fleet-")
	if err != nil {
		return nil, fmt.Errorf("workload: fleet: %w", err)
	}
	defer os.RemoveAll(dir)
	var (
		results []FleetResult
		errs    []error
	)
	for _, engine := range o.Engines {
		f, err := openFleetCluster(engine)
		if err != nil {
			return results, errors.Join(append(errs, err)...)
		}
		fmt.Fprintf(o.Progress, "%s: %s; redis %s; counting relays", engine, f.cl.describe(), rs.Addr())
		for _, s := range f.servers {
			fmt.Fprintf(o.Progress, " %s %s", s.name, s.relay.Addr())
		}
		fmt.Fprintln(o.Progress)
		for _, n := range o.Processes {
			rr, err := runFleetSize(ctx, o, f, rs.Addr(), rdb, dir, engine, n)
			results = append(results, rr...)
			if err != nil {
				// A larger fleet of this engine would fail the same way
				// (processes that cannot start on a saturated machine);
				// the next engine still runs.
				err = fmt.Errorf("workload: fleet %s N=%d: %w", engine, n, err)
				fmt.Fprintln(o.Progress, err)
				errs = append(errs, err)
				break
			}
		}
		f.close()
		if ctx.Err() != nil {
			break
		}
	}
	return results, errors.Join(errs...)
}

// fleetChild is one running process of the fleet.
type fleetChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // what it prints on stdout, line by line
	stderr *lockedBuffer
}

func (c *fleetChild) next(ctx context.Context, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case l, ok := <-c.lines:
		if !ok {
			return "", fmt.Errorf("process %d ended: %s", c.cmd.Process.Pid, lastLines(c.stderr.String(), 5))
		}
		return l, nil
	case <-t.C:
		return "", fmt.Errorf("process %d: nothing after %v", c.cmd.Process.Pid, timeout)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// dumpStacks asks a process that did not answer for its goroutines
// (SIGQUIT: the Go runtime prints them and exits) and keeps them in a
// file the returned error names.
func (c *fleetChild) dumpStacks(cause error) error {
	if err := c.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		return cause
	}
	// The dump is written before the process exits, which closes lines.
	timeout := time.After(time.Minute)
wait:
	for {
		select {
		case _, ok := <-c.lines:
			if !ok {
				break wait
			}
		case <-timeout:
			break wait
		}
	}
	f, err := os.CreateTemp("", fmt.Sprintf("freshread-fleet-%d-*.stacks", c.cmd.Process.Pid))
	if err != nil {
		return cause
	}
	defer f.Close()
	if _, err := f.WriteString(c.stderr.String()); err != nil {
		return cause
	}
	return fmt.Errorf("%w (its goroutines: %s)", cause, f.Name())
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// runFleetSize runs the two phases with n processes on a fresh database.
func runFleetSize(ctx context.Context, o FleetOptions, f *fleetCluster, redisAddr string, rdb *redis.Client, dir, engine string, n int) ([]FleetResult, error) {
	name, err := f.cl.newDatabase(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = f.cl.dropDatabase(c, name)
	}()
	if err := seed(ctx, f.cl, name, Options{Tables: 1, Users: o.Keys}); err != nil {
		return nil, err
	}
	shared := filepath.Join(dir, name+".versions")
	if err := os.WriteFile(shared, make([]byte, 8*o.Keys), 0o600); err != nil {
		return nil, fmt.Errorf("workload: fleet: %w", err)
	}
	spec := fleetChildSpec{Engine: engine, Redis: redisAddr, Database: name, Keys: o.Keys,
		WriteFraction: o.WriteFraction, Versions: shared, PrimaryPort: f.cl.primaryPort()}
	// Every connection of the fleet goes through the servers' relays.
	for i, s := range f.servers {
		direct := f.cl.primaryDSN(name)
		if i > 0 {
			direct = f.cl.replicaDSN(i-1, name)
		}
		dsn, err := dsnWithAddr(f.cl.driver(), direct, s.relay.Addr())
		if err != nil {
			return nil, err
		}
		if i == 0 {
			spec.Primary = dsn
		} else {
			spec.Replicas = append(spec.Replicas, dsn)
		}
	}

	began := time.Now()
	children, err := startFleet(ctx, o, spec, n)
	defer stopFleet(children)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Progress, "%s N=%d: ready in %v; warm-up %v\n", engine, n, time.Since(began).Round(time.Millisecond), o.Warmup)
	pids := make([]int, len(children))
	for i, c := range children {
		pids[i] = c.cmd.Process.Pid
	}
	if err := sleepCtx(ctx, o.Warmup); err != nil {
		return nil, err
	}

	// Idle.
	a, err := f.snapshot(ctx, rdb, pids)
	if err != nil {
		return nil, err
	}
	if err := sleepCtx(ctx, o.Idle); err != nil {
		return nil, err
	}
	b, err := f.snapshot(ctx, rdb, pids)
	if err != nil {
		return nil, err
	}
	idle := f.phaseResult(engine, n, PhaseIdle, a, b)
	fmt.Fprintln(o.Progress, idle.summary())
	results := []FleetResult{idle}

	// Active: every process runs its share of the rate for Active.
	cmd := fmt.Sprintf("run %g %d\n", o.Rate/float64(n), o.Active.Nanoseconds())
	a, err = f.snapshot(ctx, rdb, pids)
	if err != nil {
		return results, err
	}
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, cmd); err != nil {
			return results, fmt.Errorf("process %d: %w", c.cmd.Process.Pid, err)
		}
	}
	var stats []fleetChildStats
	for _, c := range children {
		l, err := c.next(ctx, o.Active+2*time.Minute)
		if err != nil {
			return results, c.dumpStacks(err)
		}
		var st fleetChildStats
		if err := json.Unmarshal([]byte(l), &st); err != nil {
			return results, fmt.Errorf("process %d: %q: %w", c.cmd.Process.Pid, l, err)
		}
		stats = append(stats, st)
	}
	b, err = f.snapshot(ctx, rdb, pids)
	if err != nil {
		return results, err
	}
	active := f.phaseResult(engine, n, PhaseActive, a, b)
	var lat []time.Duration
	for _, st := range stats {
		active.Reads += st.Reads
		active.Writes += st.Writes
		active.Errors += st.Errors
		active.ReplicaReads += st.ReplicaReads
		active.StaleReads += st.StaleReads
		if active.FirstError == "" {
			active.FirstError = st.FirstError
		}
		for _, us := range st.ReadLatencyMicros {
			lat = append(lat, time.Duration(us)*time.Microsecond)
		}
	}
	slices.SortFunc(lat, cmp.Compare)
	active.ReadP50, active.ReadP99 = quantile(lat, 0.5), quantile(lat, 0.99)
	fmt.Fprintln(o.Progress, active.summary())
	return append(results, active), nil
}

func (r FleetResult) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s N=%d %s %v:", r.Engine, r.Processes, r.Phase, r.Elapsed.Round(time.Millisecond))
	for _, s := range r.Servers {
		fmt.Fprintf(&b, " %s %.1f q/s", s.Name, r.PerSecond(s.Queries))
		if s.Questions >= 0 {
			fmt.Fprintf(&b, " (Questions %.1f/s)", r.PerSecond(s.Questions))
		}
	}
	fmt.Fprintf(&b, "; redis %.1f cmd/s %s; cpu %.2fs (%.4f core/process); load %s", r.PerSecond(r.RedisCalls), FormatCommands(r.RedisByCommand, r.Elapsed), r.CPU.Seconds(), r.CPUPerProcess(), r.LoadAvg)
	if r.Phase == PhaseActive {
		fmt.Fprintf(&b, "; reads %d writes %d errors %d replica %.1f%% stale %d p50 %v p99 %v", r.Reads, r.Writes, r.Errors, 100*r.ReplicaShare(), r.StaleReads, r.ReadP50, r.ReadP99)
		if r.FirstError != "" {
			fmt.Fprintf(&b, " (e.g. %s)", r.FirstError)
		}
	}
	return b.String()
}

// FormatCommands lists the commands per second, most frequent first.
func FormatCommands(m map[string]int64, d time.Duration) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.1f", k, float64(m[k])/d.Seconds())
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fleetStartAtOnce is how many processes start at once: a service rolls
// out a few processes at a time, and a hundred opening their pools at
// once on a loaded machine time out connecting.
const fleetStartAtOnce = 8

// startFleet starts n processes of spec, at most fleetStartAtOnce at a
// time, and returns once each has printed "ready" (or one failed; the
// processes started are returned either way, for stopFleet).
func startFleet(ctx context.Context, o FleetOptions, spec fleetChildSpec, n int) ([]*fleetChild, error) {
	var (
		children []*fleetChild
		mu       sync.Mutex
		errs     []error
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, fleetStartAtOnce)
	for i := range n {
		sem <- struct{}{}
		mu.Lock()
		failed := len(errs) > 0
		mu.Unlock()
		if failed {
			break
		}
		c, err := startFleetChild(ctx, o, spec, i)
		if err != nil {
			errs = append(errs, err)
			break
		}
		children = append(children, c)
		wg.Go(func() {
			defer func() { <-sem }()
			l, err := c.next(ctx, 5*time.Minute)
			if err == nil && l != "ready" {
				err = fmt.Errorf("process %d: %q, want ready", c.cmd.Process.Pid, l)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return children, errors.Join(errs...)
}

// startFleetChild starts process i of spec.
func startFleetChild(ctx context.Context, o FleetOptions, spec fleetChildSpec, i int) (*fleetChild, error) {
	spec.Index = i
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, o.Binary, o.Args...)
	cmd.Env = append(os.Environ(), EnvFleetChild+"="+string(b), "GOMAXPROCS=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c := &fleetChild{cmd: cmd, stdin: stdin, lines: make(chan string, 4), stderr: &lockedBuffer{}}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start process %d: %w", i, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	return c, nil
}

// stopFleet closes every process's stdin (it closes the plugin and exits)
// and waits for them; one still running after 30 s is killed.
func stopFleet(children []*fleetChild) {
	var wg sync.WaitGroup
	for _, c := range children {
		c.stdin.Close()
		wg.Go(func() {
			done := make(chan struct{})
			go func() {
				for range c.lines {
				}
				_ = c.cmd.Wait()
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = c.cmd.Process.Kill()
				<-done
			}
		})
	}
	wg.Wait()
}

// lockedBuffer is a process's stderr, written by exec's copying goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// ErrFleetUnsupported: the fleet needs Linux (shared memory between its
// processes, their CPU time from /proc).
var ErrFleetUnsupported = errors.New("workload: the fleet bench needs Linux")
