package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/plugin"
)

// Soak processes of their own (Config.OSProcesses): the test binary is
// started again once per plugin instance with EnvChild naming a childSpec;
// the child's test (RunChild) runs its share of the workers until the
// parent creates the stop file, then writes what it recorded to its output
// file, with wall-clock times (one clock for every process of the
// machine).

// EnvChild carries a child's specification (JSON).
const EnvChild = "FRESHREAD_SOAK_CHILD"

type childSpec struct {
	Index    int
	Share    share
	Cfg      Config
	Dialect  string
	Primary  string
	Replicas []string
	Store    storeSpec
	Tracker  bool // the plugins rely on a tracker (trackerPlugin)
	DB       string
	PortExpr string
	StopFile string
	OutFile  string
}

// history is what a child recorded.
type history struct {
	Writes        []Write
	SessionWrites []SessionWrite
	Reads         []Read
	Errs          []time.Time
	Ended         []time.Time
	FirstErrors   []string
	Refused       []Refusal
	Unknown       []Write
	Fenced        int
	Unprotected   int
}

// startChildren starts one process per plugin instance; the returned func
// waits until the soak's duration is over, stops them and merges their
// histories into rec.
func startChildren(t testing.TB, c Cluster, st Store, cut cuts, dbName string, cfg Config, rec *recorder) func() {
	t.Helper()
	started := time.Now()
	dir := t.TempDir()
	dialect, primary, _ := c.DSNs(dbName)
	stopFile := filepath.Join(dir, "stop")
	type child struct {
		cmd *exec.Cmd
		out string
		log *strings.Builder
	}
	var children []child
	for i := range cfg.Processes {
		spec := childSpec{Index: i, Share: shareOf(i, cfg), Cfg: Config{Writers: cfg.Writers, Keys: cfg.Keys},
			Dialect: dialect, Primary: primary, Replicas: cut.replicaDSNs(c, dbName, i), Store: cut.storeSpec(st, i), Tracker: cfg.Tracker, DB: dbName,
			PortExpr: c.PortExpr(), StopFile: stopFile, OutFile: filepath.Join(dir, fmt.Sprintf("child%d.json", i))}
		b, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestSoakChild$", "-test.count=1", "-test.timeout=0")
		cmd.Env = append(os.Environ(), EnvChild+"="+string(b))
		log := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatalf("start soak process %d: %v", i, err)
		}
		children = append(children, child{cmd: cmd, out: spec.OutFile, log: log})
	}
	return func() {
		time.Sleep(max(0, cfg.Duration-time.Since(started)))
		if err := os.WriteFile(stopFile, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		for i, ch := range children {
			if err := ch.cmd.Wait(); err != nil {
				t.Errorf("soak process %d: %v\n%s", i, err, ch.log.String())
				continue
			}
			b, err := os.ReadFile(ch.out)
			if err != nil {
				t.Errorf("soak process %d: %v\n%s", i, err, ch.log.String())
				continue
			}
			var h history
			if err := json.Unmarshal(b, &h); err != nil {
				t.Errorf("soak process %d: %v", i, err)
				continue
			}
			rec.writes = append(rec.writes, h.Writes...)
			rec.sessionWrites = append(rec.sessionWrites, h.SessionWrites...)
			rec.reads = append(rec.reads, h.Reads...)
			rec.errs = append(rec.errs, h.Errs...)
			rec.ended = append(rec.ended, h.Ended...)
			rec.refused = append(rec.refused, h.Refused...)
			rec.unknown = append(rec.unknown, h.Unknown...)
			rec.fenced += h.Fenced
			rec.unprotected += h.Unprotected
			rec.firstErrors = append(rec.firstErrors, h.FirstErrors...)
		}
	}
}

// RunChild is the body of a soak process: it does nothing unless EnvChild
// is set (the test that calls it is then a no-op in a normal run).
func RunChild(t *testing.T) {
	raw := os.Getenv(EnvChild)
	if raw == "" {
		t.Skip("not a soak process")
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	primary := dialector(spec.Dialect)(spec.Primary)
	var adjust func(*plugin.Config)
	if spec.Tracker {
		adjust = trackerPlugin(spec.Index)
	}
	db, p := openProcess(t, replicasOf(spec.Dialect, spec.Replicas), primary, spec.Store, spec.DB, adjust)
	plain := openPlain(t, primary)
	rec := &recorder{}
	stop := make(chan struct{})
	wait := runWorkers(context.Background(), db, plain, rec, stop, spec.PortExpr, spec.Share, spec.Cfg)
	for {
		if _, err := os.Stat(spec.StopFile); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wait()
	fenced, unprotected := leaseCounters([]*plugin.Plugin{p})
	b, err := json.Marshal(history{Writes: rec.writes, SessionWrites: rec.sessionWrites, Reads: rec.reads,
		Errs: rec.errs, Ended: rec.ended, FirstErrors: rec.firstErrors, Refused: rec.refused, Unknown: rec.unknown,
		Fenced: fenced, Unprotected: unprotected})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec.OutFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// dialector opens a DSN of dialect ("postgres" or "mysql").
func dialector(dialect string) func(string) gorm.Dialector {
	if dialect == "mysql" {
		return mysql.Open
	}
	return postgres.Open
}

// replicasOf are the plugin replicas of dsns, named as replicaName says.
func replicasOf(dialect string, dsns []string) []plugin.Replica {
	var out []plugin.Replica
	for i, dsn := range dsns {
		out = append(out, plugin.Replica{Name: replicaName(i), Dialector: dialector(dialect)(dsn)})
	}
	return out
}
