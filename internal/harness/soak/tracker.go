package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/registry"
	"github.com/freshread/freshread/tracker"
)

// A soak with Config.Tracker runs a logical-decoding tracker in a process
// of its own (this test binary again, with EnvTracker naming a
// trackerSpec; TestSoakTrackerChild runs it), which the tracker-killed
// fault kills with SIGKILL and starts again. The plugins then take the
// replicas' replay positions from the tracker (ReplayFromStore) and watch
// its decoding (DirectWrites), and another program writes a table of its
// own on a plain connection (direct writes).

// EnvTracker carries a soak tracker process's specification (JSON).
const EnvTracker = "FRESHREAD_SOAK_TRACKER"

// soakSlotPrefix is the soak trackers' replication slot prefix.
const soakSlotPrefix = "soak_"

// Soak tracker and plugin settings: the tracker publishes its decoded
// position every trackerStatus, and the plugins trust it while it covers
// what the primary had soakDecodeDelay ago.
const (
	trackerStatus   = 100 * time.Millisecond
	soakDecodeDelay = 500 * time.Millisecond
)

type trackerSpec struct {
	Store    storeSpec
	StoreDB  string // the plugins' store name for the database
	Primary  string // URL of the database on the primary
	Replicas []registry.ReplicaEntry
}

// trackerPlugin adjusts plugin instance i for a soak with a tracker: every
// instance watches the tracker's decoding (DirectWrites); the second also
// takes the replicas' replay positions from it (ReplayFromStore), the
// others poll the replicas themselves (the first runs the reader of the
// direct writes, which a tracker's death must not hide), since the tracker's positions (from
// pg_stat_replication, which a standby updates with its status messages)
// lag and would leave few reads on replicas to check.
func trackerPlugin(i int) func(*plugin.Config) {
	return func(c *plugin.Config) {
		c.DirectWrites = true
		c.ReplayFromStore = i == 1
		c.MaxDecodeDelay = soakDecodeDelay
	}
}

// directBound is how long after a direct write returned a read may still
// miss it: the plugins' MaxDecodeDelay, two polls, and a second for polls
// delayed on a loaded machine (Plugin.checkDecoding).
const directBound = soakDecodeDelay + 2*20*time.Millisecond + time.Second

// trackerProc is the soak's tracker process.
type trackerProc struct {
	t    testing.TB
	spec []byte
	mu   sync.Mutex
	cmd  *exec.Cmd
	log  *strings.Builder
}

func startTrackerProc(t testing.TB, spec trackerSpec) *trackerProc {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	p := &trackerProc{t: t, spec: b}
	if err := p.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.kill(context.Background())
		dropSoakSlot(t, spec.Primary)
	})
	return p
}

func (p *trackerProc) start(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSoakTrackerChild$", "-test.count=1", "-test.timeout=0")
	cmd.Env = append(os.Environ(), EnvTracker+"="+string(p.spec))
	p.log = &strings.Builder{}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("soak: start the tracker: %w", err)
	}
	p.cmd = cmd
	return nil
}

// kill kills the tracker with SIGKILL: no goodbye, no last status.
func (p *trackerProc) kill(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
	return nil
}

// dropSoakSlot drops the soak tracker's slot once its walsender is gone.
func dropSoakSlot(t testing.TB, primary string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, primary)
	if err != nil {
		t.Logf("drop the soak tracker's slot: %v", err)
		return
	}
	defer c.Close(ctx)
	db := c.Config().Database
	for ctx.Err() == nil {
		_, err = c.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1",
			tracker.SlotName(soakSlotPrefix, db))
		if err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("drop the soak tracker's slot: %v", err)
}

// RunTrackerChild is the body of a soak tracker process: it does nothing
// unless EnvTracker is set, and runs until it is killed.
func RunTrackerChild(t *testing.T) {
	raw := os.Getenv(EnvTracker)
	if raw == "" {
		t.Skip("not a soak tracker process")
	}
	var spec trackerSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(spec.Primary)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	tmpl := *u
	tmpl.Host = "{host}:{port}"
	tmpl.Path = "/{database}"
	dsn, err := tracker.DSNTemplate(strings.NewReplacer("%7B", "{", "%7D", "}").Replace(tmpl.String()))
	if err != nil {
		t.Fatal(err)
	}
	rdb := spec.Store.client()
	defer rdb.Close()
	tr, err := tracker.New(tracker.Config{
		Redis:              rdb,
		DSN:                dsn,
		Databases:          []registry.Entry{{Host: u.Hostname(), Port: port, Database: db, Store: spec.StoreDB, Replicas: spec.Replicas}},
		NoRegistry:         true,
		Mode:               tracker.ModeLogical,
		ReplayInterval:     20 * time.Millisecond,
		DependencyInterval: time.Second,
		StatusInterval:     trackerStatus,
		SlotPrefix:         soakSlotPrefix,
		Logger:             slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// trackerFault kills the tracker and pauses replay on the replicas (the
// cluster's replay-paused fault) together, then restarts both: a direct
// write made meanwhile is on no replica, so a plugin that kept trusting
// the dead tracker's decoded position would read it stale.
func trackerFault(p *trackerProc, clusterFaults []Fault) Fault {
	var lag Fault
	for _, f := range clusterFaults {
		if f.Name == "replay-paused" {
			lag = f
		}
	}
	return Fault{Name: "tracker-killed",
		// Longer than directBound: a plugin that kept trusting the dead
		// tracker would miss writes older than that.
		For: 3 * time.Second,
		Inject: func(ctx context.Context) error {
			if err := p.kill(ctx); err != nil {
				return err
			}
			if lag.Inject != nil {
				return lag.Inject(ctx)
			}
			return nil
		},
		Heal: func(ctx context.Context) error {
			if lag.Heal != nil {
				if err := lag.Heal(ctx); err != nil {
					return err
				}
			}
			return p.start(ctx)
		}}
}
