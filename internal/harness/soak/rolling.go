package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// A rolling upgrade (RunRolling): soak processes of the last release (its
// soak test binary, built from git history by BuildRelease) and of this
// tree (this test binary) run side by side on one store, through the
// child protocol of children.go, which both releases speak. Each process
// incarnation owns a writer index, reader seeds and a session of its own,
// so a replacement never restarts another's versions.

// Release is one line of RELEASES.
type Release struct{ Version, Commit string }

// LastRelease is the last line of root's RELEASES.
func LastRelease(root string) (Release, error) {
	f, err := os.Open(filepath.Join(root, "RELEASES"))
	if err != nil {
		return Release{}, err
	}
	defer f.Close()
	var last Release
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if fs := strings.Fields(l); len(fs) >= 2 {
			last = Release{Version: fs[0], Commit: fs[1]}
		}
	}
	if last.Commit == "" {
		return Release{}, fmt.Errorf("RELEASES: no release")
	}
	return last, sc.Err()
}

// BuildRelease builds release r's soak test binary from the git history
// of the repository this test runs in, with -race when this binary has
// it (so the dependencies come from the build cache). The tree is
// extracted once into a fixed directory (the build cache's keys name it);
// it skips t when the history is absent, and fails it then under
// FRESHREAD_REQUIRE_INTEGRATION=1.
func BuildRelease(t testing.TB) (Release, string) {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		missingHistory(t, fmt.Sprintf("not in a git checkout: %v", err))
	}
	root := strings.TrimSpace(string(out))
	rel, err := LastRelease(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("git", "-C", root, "cat-file", "-e", rel.Commit+"^{commit}").Run(); err != nil {
		missingHistory(t, fmt.Sprintf("commit %s of %s is not in the history (a shallow clone?)", rel.Commit, rel.Version))
	}
	dir := filepath.Join(os.TempDir(), "freshread-release-"+rel.Commit)
	if _, err := os.Stat(dir); err != nil {
		// Extracted beside it, then renamed into place: a run that
		// stopped half way, or one beside this one, leaves no partial tree.
		tmp, err := os.MkdirTemp(os.TempDir(), "freshread-extract-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		cmd := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, rel.Commit, tmp)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("extract %s: %v\n%s", rel.Version, err, b)
		}
		if err := os.Rename(tmp, dir); err != nil {
			if _, serr := os.Stat(dir); serr != nil {
				t.Fatalf("extract %s: %v", rel.Version, err)
			}
		}
	}
	bin := filepath.Join(t.TempDir(), "soak-"+rel.Version+".test")
	args := []string{"test", "-c", "-o", bin}
	if raceEnabled() {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./internal/harness/soak")...)
	cmd.Dir = dir
	started := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s's soak binary: %v\n%s", rel.Version, err, b)
	}
	t.Logf("built %s (%s) in %v", rel.Version, rel.Commit[:12], time.Since(started).Round(time.Millisecond))
	return rel, bin
}

func missingHistory(t testing.TB, why string) {
	t.Helper()
	if testcluster.Required() {
		t.Fatalf("rolling upgrade: %s (%s=1)", why, testcluster.EnvRequire)
	}
	t.Skipf("rolling upgrade skipped: %s", why)
}

// raceEnabled reports whether this binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// RollingConfig shapes a rolling upgrade.
type RollingConfig struct {
	Old string // the previous release's soak test binary (BuildRelease)
	// Processes run at a time [3]; at first all but one of them old.
	Processes int
	// Step is how long the processes run after each start (once it is
	// ready) [3s].
	Step time.Duration
	// OldStore, when set, is the store database name of the old processes
	// instead of the shared one (a broken setup, for a control).
	OldStore string
}

// RollingPhase is what happened in one phase of a rolling upgrade.
type RollingPhase struct {
	Name          string
	Writes, Reads int
	ReplicaReads  int
	CrossReads    int // reads of rows written by the other release's processes
	CrossReplica  int // of which served by a replica
	Stale         int
	Start, End    time.Time
}

// RollingReport is a rolling upgrade's outcome.
type RollingReport struct {
	Report
	Phases      []RollingPhase
	Pauses      int // replay pauses injected
	Incarnation int // processes started
}

func (r RollingReport) String() string {
	var b strings.Builder
	b.WriteString(r.Report.String())
	fmt.Fprintf(&b, "  %d processes started, %d replay pauses\n", r.Incarnation, r.Pauses)
	for _, p := range r.Phases {
		fmt.Fprintf(&b, "  phase %-9s %5.1fs: %6d writes, %6d reads (%d by a replica), %6d reads of the other release's rows (%d by a replica), %d stale\n",
			p.Name, p.End.Sub(p.Start).Seconds(), p.Writes, p.Reads, p.ReplicaReads, p.CrossReads, p.CrossReplica, p.Stale)
	}
	return b.String()
}

// rollingProc is one running soak process.
type rollingProc struct {
	slot   int
	old    bool
	cmd    *exec.Cmd
	spec   childSpec
	log    *strings.Builder
	exited chan struct{} // closed when it has exited, with err
	err    error
	// started is when it was started, ready when it had written.
	started, ready time.Time
}

// RunRolling runs a rolling upgrade on c (PostgreSQL or MariaDB) and st: half the
// processes of the old release and half of this one, then the old ones
// replaced one by one by new ones (the upgrade), then every new one by an
// old one (the rollback); replay on every replica is paused and resumed
// throughout, so a read sent to a replica that missed a write is stale.
// Every read is checked against every write any process had returned
// before it began.
func RunRolling(t testing.TB, c Cluster, st Store, rc RollingConfig) RollingReport {
	t.Helper()
	if rc.Processes <= 0 {
		rc.Processes = 3
	}
	if rc.Step <= 0 {
		rc.Step = 3 * time.Second
	}
	olds := max(1, rc.Processes-1)
	// Incarnations: the first Processes, then olds replacements for the
	// upgrade and Processes for the rollback.
	slots := rc.Processes + olds + rc.Processes
	cfg := Config{Writers: slots, Keys: 2 * slots, Sessions: slots}
	dbName := c.CreateDatabase(t)
	setupDB(t, c, dbName, cfg.Keys+cfg.Sessions)
	plain := openPlain(t, c.Primary(dbName))
	dialect, primary, replicas := c.DSNs(dbName)
	dir := t.TempDir()
	rec := &recorder{}
	var treads []tagged // every read, with its process
	oldSlot := map[int]bool{}
	var procs []*rollingProc // running
	started := 0

	start := func(old bool) *rollingProc {
		slot := started
		started++
		oldSlot[slot] = old
		sh := share{Writers: []int{slot}, Readers: []int{slot}, Sessions: []int{slot + 1}}
		if !old {
			sh.TableReaders = []int{0}
		}
		spec := childSpec{Index: slot, Share: sh, Cfg: Config{Writers: cfg.Writers, Keys: cfg.Keys},
			Dialect: dialect, Primary: primary, Replicas: replicas, Store: st.spec(), DB: dbName,
			PortExpr: c.PortExpr(), StopFile: filepath.Join(dir, fmt.Sprintf("stop%d", slot)),
			OutFile: filepath.Join(dir, fmt.Sprintf("child%d.json", slot))}
		bin := os.Args[0]
		if old {
			bin = rc.Old
			if rc.OldStore != "" {
				spec.DB = rc.OldStore
			}
		}
		b, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-test.run=^TestSoakChild$", "-test.count=1", "-test.timeout=0")
		cmd.Env = append(os.Environ(), EnvChild+"="+string(b))
		p := &rollingProc{slot: slot, old: old, cmd: cmd, spec: spec, log: &strings.Builder{}, exited: make(chan struct{}), started: time.Now()}
		cmd.Stdout, cmd.Stderr = p.log, p.log
		if err := cmd.Start(); err != nil {
			t.Fatalf("start soak process %d: %v", slot, err)
		}
		go func() { p.err = cmd.Wait(); close(p.exited) }()
		// Once its history is read a process may take its time to exit
		// (closing its plugin and pools): killed after 5 s.
		t.Cleanup(func() {
			select {
			case <-p.exited:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-p.exited
			}
		})
		procs = append(procs, p)
		return p
	}
	// ready waits until p has written its first key and its session's
	// (it is then open and working).
	ready := func(ps ...*rollingProc) {
		deadline := time.Now().Add(2 * time.Minute)
		for _, p := range ps {
			for {
				var n int64
				err := plain.Raw("SELECT count(*) FROM soak_rows WHERE id IN (?, ?) AND version > 0", p.slot, cfg.Keys+p.slot).Scan(&n).Error
				if err == nil && n == 2 {
					p.ready = time.Now()
					t.Logf("soak process %d (old %v) ready in %v", p.slot, p.old, p.ready.Sub(p.started).Round(time.Millisecond))
					break
				}
				select {
				case <-p.exited:
					t.Fatalf("soak process %d (old %v) exited before it was ready: %v\n%s", p.slot, p.old, p.err, p.log.String())
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("soak process %d (old %v) not ready after 2m (%v)\n%s", p.slot, p.old, err, p.log.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	stop := func(p *rollingProc) {
		asked := time.Now()
		defer func() {
			t.Logf("soak process %d (old %v) stopped in %v", p.slot, p.old, time.Since(asked).Round(time.Millisecond))
		}()
		if err := os.WriteFile(p.spec.StopFile, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		for i, q := range procs {
			if q == p {
				procs = append(procs[:i], procs[i+1:]...)
				break
			}
		}
		// The history is complete once it parses; the exit (closing the
		// plugin, the pools) is not waited for.
		var h history
		deadline := time.Now().Add(2 * time.Minute)
		for !readHistory(p.spec.OutFile, &h) {
			select {
			case <-p.exited:
				if !readHistory(p.spec.OutFile, &h) {
					t.Errorf("soak process %d (old %v) exited without its history: %v\n%s", p.slot, p.old, p.err, p.log.String())
					return
				}
				continue
			default:
			}
			if time.Now().After(deadline) {
				t.Errorf("soak process %d (old %v) wrote no history in 2m\n%s", p.slot, p.old, p.log.String())
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		if p.old {
			boundCalls(h, p.started)
		}
		rec.writes = append(rec.writes, h.Writes...)
		rec.sessionWrites = append(rec.sessionWrites, h.SessionWrites...)
		treads = append(treads, tagReads(h.Reads, p.slot)...)
		rec.errs = append(rec.errs, h.Errs...)
		rec.errs = append(rec.errs, h.Ended...) // no store cut in a rolling upgrade: errors
		rec.refused = append(rec.refused, h.Refused...)
		rec.unknown = append(rec.unknown, h.Unknown...)
		rec.firstErrors = append(rec.firstErrors, h.FirstErrors...)
	}

	// Replay paused and resumed on every replica until the end
	// (PostgreSQL's replay, MariaDB's SQL thread).
	var pause Fault
	for _, f := range c.Faults() {
		if f.Name == "replay-paused" || f.Name == "apply-stopped" {
			pause = f
		}
	}
	if pause.Inject == nil {
		t.Fatalf("%s has no fault that pauses replay", c.Engine())
	}
	ctx, cancel := context.WithCancel(context.Background())
	pauses := make(chan int, 1)
	go func() {
		n := 0
		defer func() { pauses <- n }()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			if err := pause.Inject(context.Background()); err != nil {
				t.Errorf("pause replay: %v", err)
				return
			}
			n++
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			if err := pause.Heal(context.Background()); err != nil {
				t.Errorf("resume replay: %v", err)
				return
			}
		}
	}()

	var phases []RollingPhase
	phase := func(name string, body func()) {
		p := RollingPhase{Name: name, Start: time.Now()}
		body()
		p.End = time.Now()
		phases = append(phases, p)
	}
	phase("mixed", func() {
		var ps []*rollingProc
		for i := range rc.Processes {
			ps = append(ps, start(i < olds))
		}
		ready(ps...)
		time.Sleep(2 * rc.Step)
	})
	phase("upgrade", func() {
		for _, p := range append([]*rollingProc(nil), procs...) {
			if p.old {
				stop(p)
				ready(start(false))
				time.Sleep(rc.Step)
			}
		}
	})
	phase("rollback", func() {
		for _, p := range append([]*rollingProc(nil), procs...) {
			stop(p)
			ready(start(true))
			time.Sleep(rc.Step)
		}
	})
	for len(procs) > 0 {
		stop(procs[0])
	}
	cancel()
	n := <-pauses

	rr := RollingReport{Pauses: n, Incarnation: started}
	rr.Report = Report{Engine: c.Engine(), Store: st.kind(), Duration: phases[len(phases)-1].End.Sub(phases[0].Start),
		Writes: len(rec.writes) + len(rec.sessionWrites), Reads: len(treads), Faults: map[string]*FaultStats{},
		FirstErrors: rec.firstErrors, Errors: len(rec.errs) + len(rec.ended), Refused: len(rec.refused), Unknown: len(rec.unknown)}
	reads := untag(treads)
	for _, r := range reads {
		if r.Table {
			rr.TableReads++
		}
	}
	rr.Stale = Check(rec.writes, rec.sessionWrites, reads)
	rr.Linear = checkRegular(buildHistories(rec.writes, rec.sessionWrites, rec.unknown, reads), linearTimeout)
	replica := map[int]bool{}
	for _, p := range c.ReplicaPorts() {
		replica[p] = true
	}
	stale := map[tagged]bool{}
	for _, v := range rr.Stale {
		stale[tagged{v.Read, 0}] = true
	}
	for i := range phases {
		p := &phases[i]
		in := func(at time.Time) bool { return !at.Before(p.Start) && at.Before(p.End) }
		for _, w := range rec.writes {
			if in(w.Returned) {
				p.Writes++
			}
		}
		for _, w := range rec.sessionWrites {
			if in(w.Returned) {
				p.Writes++
			}
		}
		for _, r := range treads {
			if !in(r.Started) {
				continue
			}
			p.Reads++
			onReplica := replica[r.Server]
			if onReplica {
				rr.ReplicaReads++
				p.ReplicaReads++
			}
			// Rows 0..Keys-1 belong to writer (and slot) key % Writers.
			if r.Key < cfg.Keys && r.Session == 0 && oldSlot[r.Key%cfg.Writers] != oldSlot[r.slot] {
				p.CrossReads++
				if onReplica {
					p.CrossReplica++
				}
			}
			if stale[tagged{r.Read, 0}] {
				p.Stale++
			}
		}
	}
	rr.Phases = phases
	return rr
}

// readHistory reads a child's history into h; false until it is complete.
func readHistory(path string, h *history) bool {
	b, err := os.ReadFile(path)
	return err == nil && json.Unmarshal(b, h) == nil
}

// boundCalls sets the call times of h's writes that have none (the last
// release does not record them): a process's writer, and its session, make
// one write at a time, so each was called after the one before it
// returned (the first after the process started). Without a call time
// the linearizability check takes the return time, as late as it could be, and a read
// concurrent with the write would look impossible.
func boundCalls(h history, started time.Time) {
	prev := started
	for i := range h.Writes {
		if h.Writes[i].Called.IsZero() {
			h.Writes[i].Called = prev
		}
		prev = h.Writes[i].Returned
	}
	prev = started
	for i := range h.SessionWrites {
		if h.SessionWrites[i].Called.IsZero() {
			h.SessionWrites[i].Called = prev
		}
		prev = h.SessionWrites[i].Returned
	}
}

// tagged is a read with the slot of the process that made it.
type tagged struct {
	Read
	slot int
}

func tagReads(rs []Read, slot int) []tagged {
	out := make([]tagged, len(rs))
	for i, r := range rs {
		out[i] = tagged{r, slot}
	}
	return out
}

func untag(ts []tagged) []Read {
	out := make([]Read, len(ts))
	for i, r := range ts {
		out[i] = r.Read
	}
	return out
}
