package soak

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/internal/lib/sqlerr"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/registry"
)

// Cluster is the database side of a soak.
type Cluster interface {
	// Engine names it ("postgres", "mariadb").
	Engine() string
	// CreateDatabase creates a fresh replicated database for t.
	CreateDatabase(t testing.TB) string
	Primary(db string) gorm.Dialector
	Replicas(db string) []plugin.Replica
	// PortExpr is the SQL expression for the answering server's port.
	PortExpr() string
	ReplicaPorts() []int
	WaitCaughtUp(ctx context.Context) error
	// Faults are the engine's faults.
	Faults() []Fault
	// DSNs are the dialect ("postgres" or "mysql") and the connection
	// strings of database db, for soak processes of their own (OSProcesses).
	DSNs(db string) (dialect, primary string, replicas []string)
	// replicaAddr is replica 0's address as the plugins reach it, and
	// replicaDSNsVia the replicas' DSNs with replica 0 reached at
	// 127.0.0.1:port instead (the cut instance's relay, cut.go).
	replicaAddr() (host string, port int)
	replicaDSNsVia(db string, port int) []string
}

// Fault is one kind of fault: Inject starts it, Heal ends it (nil: it
// ends by itself when Inject returns). PrimaryDown marks faults during
// which callers may get errors (the primary is away): errors are counted
// apart.
type Fault struct {
	Name string
	// For, when set, is how long this fault lasts instead of
	// Config.FaultFor.
	For time.Duration
	// Lasts, when set, draws each injection's length (instead of For).
	Lasts       func() time.Duration
	Inject      func(ctx context.Context) error
	Heal        func(ctx context.Context) error
	PrimaryDown bool
	// LosesLeases marks a fault that may lose lease renewals the store
	// acknowledged (a failover to a replica that missed them): until a
	// writer's lease as the store then holds it has lapsed and been
	// fenced, the others' writer fence may end that writer's connections
	// although its own view of the lease still holds.
	LosesLeases bool
	// Note, when set, is a line about the injections for the report.
	Note func() string
}

// Config shapes a soak. Zero fields take the defaults in brackets.
type Config struct {
	Duration  time.Duration // [30s]
	Processes int           // plugin instances, each with its own Redis client and pools [3]
	Writers   int           // [4]
	Readers   int           // [8]
	// TableReaders read the whole table (not pinned to a key) [2]; they
	// run in the instances after the first, which the cut faults cut.
	TableReaders int
	Sessions     int           // goroutines that write and read back in a session [2]
	Keys         int           // rows the writers update [64]
	FaultEvery   time.Duration // from one fault's start to the next [3s]
	FaultFor     time.Duration // how long a fault lasts [1s]
	// OSProcesses runs each plugin instance in a process of its own (this
	// test binary started again, see RunChild) instead of in this one.
	OSProcesses bool
	// Tracker runs a logical-decoding tracker in a process of its own,
	// killed and restarted by the tracker-killed fault, with plugins that
	// rely on it (ReplayFromStore, DirectWrites) and writes made outside
	// the plugins (direct.go). PostgreSQL only.
	Tracker bool
	// Only, when set, restricts the faults to those named.
	Only []string
	// Plugin, when set, adjusts every instance's plugin.Config.
	Plugin func(*plugin.Config) `json:"-"`
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Processes, 3)
	def(&c.Writers, 4)
	def(&c.Readers, 8)
	def(&c.TableReaders, 2)
	def(&c.Sessions, 2)
	def(&c.Keys, 64)
	if c.Duration <= 0 {
		c.Duration = 30 * time.Second
	}
	if c.FaultEvery <= 0 {
		c.FaultEvery = 3 * time.Second
	}
	if c.FaultFor <= 0 {
		c.FaultFor = time.Second
	}
	return c
}

// FaultStats is what one kind of fault did.
type FaultStats struct {
	Injected int
	// Recovery is, per injection, the time from the fault's end until
	// the first read served by a replica that began after it (-1: none
	// before the next fault or the end).
	Recovery []time.Duration
	// Slowest is the longest a read that began during an injection took.
	Slowest time.Duration
	// Refused is the writes refused (ErrStoreUnreachable) from an
	// injection's start until soakLease after its end.
	Refused int
	Note    string
}

// Report is a soak's outcome.
type Report struct {
	Engine          string
	Store           string // "redis", "redis-sentinel"
	Duration        time.Duration
	Writes, Reads   int
	Stale           []Violation
	Errors          int // errors returned to callers while the primary was up
	ErrorsPrimaryOK int // errors while a PrimaryDown fault was on (allowed)
	// EndedByFence is the errors of statements whose connection another
	// process ended while, or just after, the process was cut from Redis
	// or the store lost acknowledged lease renewals (allowed: its lease
	// lapsed in the store, and the others' writer fence ends the
	// connections of a lapsed lease; a write among them is of unknown
	// outcome). Such an error at any other time is among Errors.
	EndedByFence int
	ReplicaReads int
	Faults       map[string]*FaultStats
	FirstErrors  []string
	// TableReads is the reads of a row made by reading the whole table
	// (among Reads).
	TableReads int
	// Refused is the writes refused with plugin.ErrStoreUnreachable (not
	// acknowledged: not in Writes, not errors); RefusedCommitted those the
	// primary held afterwards anyway (must be none), RefusedUnverified those
	// the check could not read back (treated as of unknown outcome).
	Refused           int
	RefusedCommitted  []Write
	RefusedUnverified int
	// Unknown is the writes that failed otherwise (among the errors):
	// they may have committed.
	Unknown int
	// Fenced and Unprotected are the plugins' own counts of the writes
	// they refused (freshread_writes_fenced_total) and of the committed
	// writes they could neither publish nor cover by their lease
	// (freshread_writes_unprotected_total: acknowledged, they may be read
	// stale; the checkers say whether any was).
	Fenced, Unprotected int
	// Linear is the linearizability check of every read against its row's writes
	// (a regular register per row: must be Ok); AtomicOK, AtomicIllegal
	// and AtomicUnknown count the rows whose whole history is, is not, or
	// was not found (timeout) linearizable: stronger than freshread
	// promises, for information (linear.go).
	Linear                                 LinearResult
	AtomicOK, AtomicIllegal, AtomicUnknown int
	// Direct writes (Config.Tracker): reads that missed one that returned
	// before they began (DirectLate, allowed: the tracker decodes it
	// within milliseconds, or it is dead) and those that missed one that
	// returned more than directBound before (DirectStale: must be none).
	DirectWrites, DirectReads int
	DirectLate                []Violation
	DirectLateBy              time.Duration // the longest a late read began after the oldest write it missed
	DirectStale               []Violation
}

// ReplicaShare is the share of reads served by a replica.
func (r Report) ReplicaShare() float64 {
	if r.Reads == 0 {
		return 0
	}
	return float64(r.ReplicaReads) / float64(r.Reads)
}

// String is the report as printed by the soak.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak %s, store %s, %v: %d writes, %d reads (%d by table), %d stale, %d errors (+%d while the primary was down), replica share %.1f%%\n",
		r.Engine, r.Store, r.Duration.Round(time.Second), r.Writes, r.Reads, r.TableReads, len(r.Stale), r.Errors, r.ErrorsPrimaryOK, 100*r.ReplicaShare())
	fmt.Fprintf(&b, "  writes refused (ErrStoreUnreachable) %d: %d found committed, %d not verified; writes of unknown outcome %d; plugins' counters: %d fenced, %d unprotected; statements on connections the writer fence ended (cut process, lost lease renewals) %d\n",
		r.Refused, len(r.RefusedCommitted), r.RefusedUnverified, r.Unknown, r.Fenced, r.Unprotected, r.EndedByFence)
	fmt.Fprintf(&b, "  linearizability, each read against its row's writes: %v; whole rows (atomic, information): %d linearizable, %d not, %d undecided\n",
		r.Linear, r.AtomicOK, r.AtomicIllegal, r.AtomicUnknown)
	for _, v := range r.Linear.Violations {
		fmt.Fprintf(&b, "  NOT LINEARIZABLE %s\n", v)
	}
	for _, w := range r.RefusedCommitted {
		fmt.Fprintf(&b, "  REFUSED BUT COMMITTED: key %d version %d (refused at %s)\n", w.Key, w.Version, w.Returned.Format("15:04:05.000"))
	}
	names := make([]string, 0, len(r.Faults))
	for n := range r.Faults {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := r.Faults[n]
		var worst, sum time.Duration
		ok := 0
		for _, d := range f.Recovery {
			if d < 0 {
				continue
			}
			ok++
			sum += d
			worst = max(worst, d)
		}
		mean := time.Duration(0)
		if ok > 0 {
			mean = sum / time.Duration(ok)
		}
		fmt.Fprintf(&b, "  %-20s injected %d, back on replicas after the fault: mean %v, max %v (%d of %d measured); slowest read begun during it %v; %d writes refused\n",
			n, f.Injected, mean.Round(time.Millisecond), worst.Round(time.Millisecond), ok, len(f.Recovery), f.Slowest.Round(time.Millisecond), f.Refused)
		if f.Note != "" {
			fmt.Fprintf(&b, "  %-20s %s\n", "", f.Note)
		}
	}
	if r.DirectWrites > 0 {
		fmt.Fprintf(&b, "  direct writes (outside the plugins): %d writes, %d reads; %d reads missed one that had returned (at most %v after it), %d beyond %v\n",
			r.DirectWrites, r.DirectReads, len(r.DirectLate), r.DirectLateBy.Round(time.Millisecond), len(r.DirectStale), directBound)
	}
	for i, v := range append(slices.Clip(r.Stale), r.DirectStale...) {
		if i == 10 {
			fmt.Fprintf(&b, "  ... %d more stale reads\n", len(r.Stale)+len(r.DirectStale)-10)
			break
		}
		fmt.Fprintf(&b, "  STALE (%s): key %d saw version %d from port %d, want >= %d (written %v before the read began)\n",
			v.Kind, v.Read.Key, v.Read.Version, v.Read.Server, v.Want, v.Read.Started.Sub(v.Write.Returned))
	}
	for _, e := range r.FirstErrors {
		fmt.Fprintf(&b, "  error: %s\n", e)
	}
	return b.String()
}

// recorder collects the history.
type recorder struct {
	mu            sync.Mutex
	writes        []Write
	sessionWrites []SessionWrite
	reads         []Read
	errs          []time.Time
	// ended: errors because another process ended the connection
	// (sqlerr.EndedByOther: the plugins' writer fence ends a lapsed
	// lease's connections).
	ended        []time.Time
	firstErrors  []string
	directWrites []Write
	directReads  []Read
	refused      []Refusal
	unknown      []Write // writes that failed otherwise: outcome unknown
	plugins      []*plugin.Plugin
	// fenced and unprotected: the plugins' counters (leaseCounters) of
	// the soak processes of their own.
	fenced, unprotected int
}

func (r *recorder) err(err error) {
	r.mu.Lock()
	if sqlerr.EndedByOther(err) {
		r.ended = append(r.ended, time.Now())
	} else {
		r.errs = append(r.errs, time.Now())
	}
	if len(r.firstErrors) < 5 {
		r.firstErrors = append(r.firstErrors, err.Error())
	}
	r.mu.Unlock()
}

// faultWindow is one injected fault.
type faultWindow struct {
	name        string
	start, end  time.Time
	primaryDown bool
	losesLeases bool
}

// Run runs a soak on c with the store on st and returns its report.
// Faults run one at a time on a schedule, every fault of c and the
// store's (Redis restarted empty, FLUSHALL, eviction; or a Sentinel
// failover) in turn.
func Run(t testing.TB, c Cluster, st Store, cfg Config) Report {
	t.Helper()
	cfg = cfg.withDefaults()
	ctx := context.Background()
	dbName := c.CreateDatabase(t)
	setupDB(t, c, dbName, cfg.Keys+cfg.Sessions)
	started := time.Now()

	port := c.PortExpr()
	replicaPort := map[int]bool{}
	for _, p := range c.ReplicaPorts() {
		replicaPort[p] = true
	}

	rec := &recorder{}
	cut := newCuts(t, c, st)
	plain := openPlain(t, c.Primary(dbName))
	var trk *trackerProc
	if cfg.Tracker {
		if c.Engine() != "postgres" {
			t.Fatalf("soak: a tracker needs PostgreSQL, not %s", c.Engine())
		}
		_, primaryURL, _ := c.DSNs(dbName)
		spec := trackerSpec{Store: st.spec(), StoreDB: storeName(dbName), Primary: primaryURL}
		u, err := url.Parse(primaryURL)
		if err != nil {
			t.Fatalf("soak: primary URL: %v", err)
		}
		for i, p := range c.ReplicaPorts() {
			spec.Replicas = append(spec.Replicas, registry.ReplicaEntry{Name: replicaName(i), Host: u.Hostname(), Port: p})
		}
		trk = startTrackerProc(t, spec)
	}
	adjust := func(i int) func(*plugin.Config) {
		return func(pc *plugin.Config) {
			if cfg.Tracker {
				trackerPlugin(i)(pc)
			}
			if cfg.Plugin != nil {
				cfg.Plugin(pc)
			}
		}
	}
	var wait func()
	if cfg.OSProcesses {
		wait = startChildren(t, c, st, cut, dbName, cfg, rec)
	} else {
		stop := make(chan struct{})
		var waits []func()
		for i := range cfg.Processes {
			dialect, _, _ := c.DSNs(dbName)
			db, p := openProcess(t, replicasOf(dialect, cut.replicaDSNs(c, dbName, i)), c.Primary(dbName), cut.storeSpec(st, i), dbName, adjust(i))
			rec.plugins = append(rec.plugins, p)
			waits = append(waits, runWorkers(ctx, db, plain, rec, stop, port, shareOf(i, cfg), cfg))
			if i == 0 && cfg.Tracker {
				waits = append(waits, runDirect(ctx, t, c, dbName, db, rec, stop, port))
			}
		}
		wait = func() {
			time.Sleep(max(0, cfg.Duration-time.Since(started)))
			close(stop)
			for _, w := range waits {
				w()
			}
		}
	}

	faults := append(append(c.Faults(), st.faults()...), cut.faults()...)
	if trk != nil {
		faults = append(faults, trackerFault(trk, c.Faults()))
	}
	if len(cfg.Only) > 0 {
		faults = slices.DeleteFunc(faults, func(f Fault) bool { return !slices.Contains(cfg.Only, f.Name) })
		if len(faults) == 0 {
			t.Fatalf("soak: no fault named %q", cfg.Only)
		}
	}
	start := started
	var windows []faultWindow
	// At least one fault runs however long the setup above took: on a
	// loaded machine opening the processes can eat the whole schedule,
	// and a soak that injected nothing proves nothing.
	for i := 0; i == 0 || time.Since(start)+cfg.FaultEvery <= cfg.Duration; i++ {
		f := faults[i%len(faults)]
		lasts := cfg.FaultFor
		if f.For > 0 {
			lasts = f.For
		}
		if f.Lasts != nil {
			lasts = f.Lasts()
		}
		time.Sleep(max(cfg.FaultEvery-lasts, cfg.FaultEvery-cfg.FaultFor))
		w := faultWindow{name: f.Name, start: time.Now(), primaryDown: f.PrimaryDown, losesLeases: f.LosesLeases}
		if err := f.Inject(ctx); err != nil {
			t.Errorf("fault %s: inject: %v", f.Name, err)
		}
		time.Sleep(lasts)
		if f.Heal != nil {
			if err := f.Heal(ctx); err != nil {
				t.Errorf("fault %s: heal: %v", f.Name, err)
			}
		}
		w.end = time.Now()
		windows = append(windows, w)
	}
	wait()
	elapsed := time.Since(start)

	rep := Report{Engine: c.Engine(), Store: st.kind(), Duration: elapsed, Writes: len(rec.writes) + len(rec.sessionWrites),
		Reads: len(rec.reads), Faults: map[string]*FaultStats{}, FirstErrors: rec.firstErrors}
	rep.Stale = Check(rec.writes, rec.sessionWrites, rec.reads)
	rep.Refused, rep.Unknown = len(rec.refused), len(rec.unknown)
	f, u := leaseCounters(rec.plugins)
	rep.Fenced, rep.Unprotected = rec.fenced+f, rec.unprotected+u
	for _, ref := range rec.refused {
		switch {
		case !ref.Verified:
			rep.RefusedUnverified++
		case ref.Committed:
			rep.RefusedCommitted = append(rep.RefusedCommitted, ref.Write)
		}
	}
	for _, rd := range rec.reads {
		if rd.Table {
			rep.TableReads++
		}
	}
	hist := buildHistories(rec.writes, rec.sessionWrites, rec.unknown, rec.reads)
	rep.Linear = checkRegular(hist, linearTimeout)
	rep.AtomicOK, rep.AtomicIllegal, rep.AtomicUnknown = checkAtomic(hist, atomicTimeout)
	rep.DirectWrites, rep.DirectReads = len(rec.directWrites), len(rec.directReads)
	rep.DirectLate, rep.DirectLateBy, rep.DirectStale = checkDirect(rec.directWrites, rec.directReads, directBound)
	for _, rd := range rec.reads {
		if replicaPort[rd.Server] {
			rep.ReplicaReads++
		}
	}
	for _, at := range rec.errs {
		if inPrimaryDown(windows, at) {
			rep.ErrorsPrimaryOK++
		} else {
			rep.Errors++
		}
	}
	for _, at := range rec.ended {
		switch {
		case inFenceWindow(windows, at):
			rep.EndedByFence++
		case inPrimaryDown(windows, at):
			rep.ErrorsPrimaryOK++
		default:
			rep.Errors++
		}
	}
	sort.Slice(rec.reads, func(i, j int) bool { return rec.reads[i].Started.Before(rec.reads[j].Started) })
	for i, w := range windows {
		fs := rep.Faults[w.name]
		if fs == nil {
			fs = &FaultStats{}
			rep.Faults[w.name] = fs
		}
		fs.Injected++
		until := start.Add(elapsed)
		if i+1 < len(windows) {
			until = windows[i+1].start
		}
		fs.Recovery = append(fs.Recovery, recovery(rec.reads, replicaPort, w.end, until))
		fs.Slowest = max(fs.Slowest, slowest(rec.reads, w.start, w.end))
		for _, ref := range rec.refused {
			if !ref.Returned.Before(w.start) && ref.Returned.Before(w.end.Add(soakLease)) {
				fs.Refused++
			}
		}
	}
	for _, f := range faults {
		if fs := rep.Faults[f.Name]; fs != nil && f.Note != nil {
			fs.Note = f.Note()
		}
	}
	return rep
}

// Bounds of the linearizability checks (linear.go): past linearTimeout the check
// is Unknown (the soak fails); rows not checked within atomicTimeout are
// counted undecided.
const (
	linearTimeout = 5 * time.Minute
	atomicTimeout = 20 * time.Second
)

// recovery is the time from healed until the first replica-served read
// that began after it and before until; -1 if none.
func recovery(reads []Read, replica map[int]bool, healed, until time.Time) time.Duration {
	i := sort.Search(len(reads), func(i int) bool { return !reads[i].Started.Before(healed) })
	for ; i < len(reads) && reads[i].Started.Before(until); i++ {
		if replica[reads[i].Server] {
			return reads[i].Started.Sub(healed)
		}
	}
	return -1
}

// slowest is the longest a read (sorted by start) that began in [from,
// to) took.
func slowest(reads []Read, from, to time.Time) time.Duration {
	var worst time.Duration
	i := sort.Search(len(reads), func(i int) bool { return !reads[i].Started.Before(from) })
	for ; i < len(reads) && reads[i].Started.Before(to); i++ {
		worst = max(worst, reads[i].Took)
	}
	return worst
}

// inFenceWindow reports whether at falls where the plugins' writer fence
// may end a writer's connections: a cut between a process and Redis
// (redis-partition-one) or the 3 s after it (the others end the cut
// process's connections once its lease lapsed, up to a poll after the cut
// healed), or a fault that loses acknowledged lease renewals
// (Fault.LosesLeases) and the writer lease plus 3 s after it (the store's
// copy of a lease can end up to a lease before the writer's own view).
func inFenceWindow(ws []faultWindow, at time.Time) bool {
	for _, w := range ws {
		after := time.Duration(0)
		switch {
		case w.name == "redis-partition-one":
			after = 3 * time.Second
		case w.losesLeases:
			after = soakLease + 3*time.Second
		default:
			continue
		}
		if !at.Before(w.start) && at.Before(w.end.Add(after)) {
			return true
		}
	}
	return false
}

// inPrimaryDown reports whether at falls in a PrimaryDown fault or the 3 s
// after it (connections to a restarted primary fail once).
func inPrimaryDown(ws []faultWindow, at time.Time) bool {
	for _, w := range ws {
		if w.primaryDown && !at.Before(w.start) && at.Before(w.end.Add(3*time.Second)) {
			return true
		}
	}
	return false
}

// setupDB creates soak_rows with n rows at version 0 through a plain
// *gorm.DB (no plugin) and waits until the replicas have them.
func setupDB(t testing.TB, c Cluster, dbName string, n int) {
	t.Helper()
	db, err := gorm.Open(c.Primary(dbName), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if s, err := db.DB(); err == nil {
			s.Close()
		}
	}()
	if err := db.Exec("CREATE TABLE soak_rows (id int PRIMARY KEY, version bigint NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	if err := createDirectTable(db); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := db.Exec("INSERT INTO soak_rows (id, version) VALUES (?, 0)", i).Error; err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
}

// openProcess opens one plugin instance with its own Redis client.
func openProcess(t testing.TB, replicas []plugin.Replica, primary gorm.Dialector, store storeSpec, dbName string, adjust func(*plugin.Config)) (*gorm.DB, *plugin.Plugin) {
	t.Helper()
	rdb := store.client()
	db, err := gorm.Open(primary, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	pc := plugin.Config{
		Replicas: replicas,
		Store:    lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: storeName(dbName)}),
		// Faults make every instance warn many times: keep errors only.
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		WriterLease: soakLease,
	}
	if adjust != nil {
		adjust(&pc)
	}
	p := plugin.New(pc)
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		if s, err := db.DB(); err == nil {
			s.Close()
		}
		rdb.Close()
	})
	return db, p
}

// storeName is the plugins' store name for database db.
func storeName(db string) string { return "soak-" + db }

// replicaName is the name of replica i for the plugins (and the tracker).
func replicaName(i int) string { return "r" + strconv.Itoa(i) }

// runDirect starts the direct writer (a plain connection to the primary)
// and a reader of its table through db; the returned func waits for them.
func runDirect(ctx context.Context, t testing.TB, c Cluster, dbName string, db *gorm.DB, rec *recorder, stop <-chan struct{}, port string) func() {
	plain := openPlain(t, c.Primary(dbName))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); directWriter(ctx, plain, rec, stop) }()
	go func() {
		defer wg.Done()
		readTable(ctx, db, rec, stop, port, 99, directKeys, "soak_direct", &rec.directReads)
	}()
	return wg.Wait
}

// share is the workers one plugin instance runs: writers by index (a
// writer owns the keys k with k % Writers == index), readers by seed,
// sessions by number (session s owns key Keys+s-1).
type share struct {
	Writers, Readers, Sessions, TableReaders []int
}

// shareOf deals the workers round-robin over the processes.
func shareOf(i int, cfg Config) share {
	var s share
	for w := range cfg.Writers {
		if w%cfg.Processes == i {
			s.Writers = append(s.Writers, w)
		}
	}
	for r := range cfg.Readers {
		if r%cfg.Processes == i {
			s.Readers = append(s.Readers, r)
		}
	}
	for x := range cfg.Sessions {
		if x%cfg.Processes == i {
			s.Sessions = append(s.Sessions, x+1)
		}
	}
	// Table readers in the instances after the cut one (the first).
	for x := range cfg.TableReaders {
		if cfg.Processes == 1 || (cutInstance+1+x%(cfg.Processes-1))%cfg.Processes == i {
			s.TableReaders = append(s.TableReaders, x)
		}
	}
	return s
}

// runWorkers starts sh's workers on db until stop closes; the returned
// func waits for them.
func runWorkers(ctx context.Context, db, plain *gorm.DB, rec *recorder, stop <-chan struct{}, port string, sh share, cfg Config) func() {
	var wg sync.WaitGroup
	for _, w := range sh.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			writer(ctx, db, plain, rec, stop, w, cfg)
		}()
	}
	for range sh.TableReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tableReader(ctx, db, rec, stop, port)
		}()
	}
	for _, r := range sh.Readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reader(ctx, db, rec, stop, port, r, cfg.Keys)
		}()
	}
	for _, s := range sh.Sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sessionWorker(ctx, db, plain, rec, stop, port, s, cfg.Keys+s-1)
		}()
	}
	return wg.Wait
}

// opTimeout bounds one statement of the workload.
const opTimeout = 10 * time.Second

// writer bumps the versions of the keys k with k % Writers == w, in turn;
// a failed write is checked on plain (failedWrite).
func writer(ctx context.Context, db, plain *gorm.DB, rec *recorder, stop <-chan struct{}, w int, cfg Config) {
	next := func(k int) int {
		if k += cfg.Writers; k >= cfg.Keys {
			return w
		}
		return k
	}
	bump(ctx, db, stop, "soak_rows", w, next, 2*time.Millisecond, func(wr Write, err error) {
		if err != nil {
			failedWrite(ctx, plain, rec, wr, err, "write")
			return
		}
		rec.mu.Lock()
		rec.writes = append(rec.writes, wr)
		rec.mu.Unlock()
	})
}

// bump bumps the versions of table's rows, key first then next(key) and so
// on, pausing between writes, until stop closes; done gets each write that
// returned (or its error).
func bump(ctx context.Context, db *gorm.DB, stop <-chan struct{}, table string, first int, next func(int) int, pause time.Duration, done func(Write, error)) {
	version := map[int]int64{}
	for k := first; ; k = next(k) {
		select {
		case <-stop:
			return
		default:
		}
		v := version[k] + 1
		called := time.Now()
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		err := db.WithContext(octx).Exec("UPDATE "+table+" SET version = ? WHERE id = ?", v, k).Error
		cancel()
		version[k] = v // on an error the write may have committed: never reuse v
		done(Write{Key: k, Version: v, Called: called, Returned: time.Now()}, err)
		time.Sleep(pause)
	}
}

type row struct {
	Version int64
	Port    int
}

// reader reads random keys of soak_rows.
func reader(ctx context.Context, db *gorm.DB, rec *recorder, stop <-chan struct{}, port string, seed, keys int) {
	readTable(ctx, db, rec, stop, port, seed, keys, "soak_rows", &rec.reads)
}

// readTable reads random keys of table, recording the reads in *into.
func readTable(ctx context.Context, db *gorm.DB, rec *recorder, stop <-chan struct{}, port string, seed, keys int, table string, into *[]Read) {
	rnd := rand.New(rand.NewPCG(uint64(seed), 42))
	for {
		select {
		case <-stop:
			return
		default:
		}
		k := rnd.IntN(keys)
		started := time.Now()
		var r row
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		err := db.WithContext(octx).Table(table).Select("version, "+port+" AS port").Where("id = ?", k).Scan(&r).Error
		cancel()
		if err != nil {
			rec.err(fmt.Errorf("read %s: %w", table, err))
			continue
		}
		rec.mu.Lock()
		*into = append(*into, Read{Key: k, Version: r.Version, Started: started, Server: r.Port, Took: time.Since(started)})
		rec.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
}

// tableReader reads the whole of soak_rows (a read by table, not pinned
// to a key), recording a Read per row.
func tableReader(ctx context.Context, db *gorm.DB, rec *recorder, stop <-chan struct{}, port string) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		started := time.Now()
		var rows []struct {
			ID      int
			Version int64
			Port    int
		}
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		err := db.WithContext(octx).Table("soak_rows").Select("id, version, " + port + " AS port").Order("id").Scan(&rows).Error
		cancel()
		took := time.Since(started)
		if err != nil {
			rec.err(fmt.Errorf("read soak_rows by table: %w", err))
			continue
		}
		rec.mu.Lock()
		for _, r := range rows {
			rec.reads = append(rec.reads, Read{Key: r.ID, Version: r.Version, Started: started, Server: r.Port, Took: took, Table: true})
		}
		rec.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

// sessionWorker writes its own key in a session and reads it back in the
// same session.
func sessionWorker(ctx context.Context, db, plain *gorm.DB, rec *recorder, stop <-chan struct{}, port string, session, key int) {
	sctx := plugin.WithSession(ctx)
	var v int64
	for {
		select {
		case <-stop:
			return
		default:
		}
		v++
		called := time.Now()
		octx, cancel := context.WithTimeout(sctx, opTimeout)
		err := db.WithContext(octx).Exec("UPDATE soak_rows SET version = ? WHERE id = ?", v, key).Error
		cancel()
		w := Write{Key: key, Version: v, Called: called, Returned: time.Now()}
		if err != nil {
			failedWrite(ctx, plain, rec, w, err, "session write")
			time.Sleep(5 * time.Millisecond)
			continue
		}
		rec.mu.Lock()
		rec.sessionWrites = append(rec.sessionWrites, SessionWrite{Session: session, Write: w})
		rec.mu.Unlock()
		started := time.Now()
		var r row
		octx, cancel = context.WithTimeout(sctx, opTimeout)
		err = db.WithContext(octx).Table("soak_rows").Select("version, "+port+" AS port").Where("id = ?", key).Scan(&r).Error
		cancel()
		if err != nil {
			rec.err(fmt.Errorf("session read: %w", err))
			continue
		}
		rec.mu.Lock()
		rec.reads = append(rec.reads, Read{Key: key, Version: r.Version, Started: started, Session: session, Server: r.Port, Took: time.Since(started)})
		rec.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
}

// RedisArgs configure the soak's Redis (testcluster.RedisWithArgsFor):
// a server that may evict keys with a TTL, nearest expiry first, as a
// shared cache is often configured; far from full until the eviction
// fault. The plugins see the policy at start and guard every read.
var RedisArgs = []string{"--maxmemory", "1gb", "--maxmemory-policy", "volatile-ttl"}

// redisFaults are the store's faults.
func redisFaults(r *testcluster.Redis) []Fault {
	admin := func(ctx context.Context, f func(*redis.Client) error) error {
		c := redis.NewClient(&redis.Options{Addr: r.Addr()})
		defer c.Close()
		return f(c)
	}
	var stopJunk func()
	var evictedBefore int64
	return []Fault{
		{Name: "redis-restart-empty",
			Inject: func(ctx context.Context) error { return r.Stop(ctx) },
			Heal:   func(ctx context.Context) error { return r.Start(ctx) }},
		{Name: "redis-flushall",
			Inject: func(ctx context.Context) error {
				return admin(ctx, func(c *redis.Client) error { return c.FlushAll(ctx).Err() })
			}},
		// Memory pressure: maxmemory just above what the server uses, and
		// a client filling it with keys of a long TTL, so the server keeps
		// evicting, the position keys first (volatile-ttl).
		{Name: "redis-eviction",
			Inject: func(ctx context.Context) error {
				c := redis.NewClient(&redis.Options{Addr: r.Addr()})
				used, err := infoField(ctx, c, "memory", "used_memory")
				if err == nil {
					evictedBefore, err = infoField(ctx, c, "stats", "evicted_keys")
				}
				if err != nil {
					c.Close()
					return err
				}
				if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+(256<<10), 10)).Err(); err != nil {
					c.Close()
					return err
				}
				// Past maxmemory before Inject returns (128 × 4 KiB against
				// 256 KiB of room), so the fault evicts even when a loaded
				// machine starves the writer below (a CI run under -race
				// healed an eviction fault that had evicted nothing).
				val := strings.Repeat("x", 4096)
				for i := 0; i < 128; i++ {
					if err := c.Set(ctx, "soak-junk-"+strconv.Itoa(i), val, time.Hour).Err(); err != nil {
						c.Close()
						return err
					}
				}
				done := make(chan struct{})
				stopped := make(chan struct{})
				go func() {
					defer close(stopped)
					for i := 128; ; i++ {
						select {
						case <-done:
							return
						default:
						}
						c.Set(ctx, "soak-junk-"+strconv.Itoa(i%4096), val, time.Hour)
					}
				}()
				stopJunk = func() { close(done); <-stopped; c.Close() }
				return nil
			},
			Heal: func(ctx context.Context) error {
				if stopJunk != nil {
					stopJunk()
					stopJunk = nil
				}
				return admin(ctx, func(c *redis.Client) error {
					if err := c.Eval(ctx, "for _, k in ipairs(redis.call('KEYS', 'soak-junk-*')) do redis.call('DEL', k) end return 0", nil).Err(); err != nil {
						return err
					}
					if err := c.ConfigSet(ctx, "maxmemory", "1gb").Err(); err != nil {
						return err
					}
					// The fault must have evicted something.
					if ev, err := infoField(ctx, c, "stats", "evicted_keys"); err != nil || ev == evictedBefore {
						return fmt.Errorf("soak: no key evicted during the eviction fault (evicted_keys %d, %v)", ev, err)
					}
					return nil
				})
			}},
	}
}

// infoField is a numeric field of the server's INFO section.
func infoField(ctx context.Context, c *redis.Client, section, field string) (int64, error) {
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("soak: no %s in INFO %s", field, section)
}
