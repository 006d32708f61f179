package integration_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// TestReplicaDownAndUp: a replica that goes down while the plugin runs
// (its relay closes every connection and refuses new ones, as a server
// that is gone does) and comes back. While it is down, reads are served by
// the primary with the primary's data, reason no-replica, including a row
// written meanwhile; the log says "replica is down" at WARN once per
// transition however many polls and reads see it down, and "replica is up
// again" at INFO when it answers; then reads go back to it and return that row. With the
// in-memory store (the process polls the replica itself) and with two
// processes sharing a Redis store (one polls for both, the other follows
// its snapshots and logs the transitions too). Both engines.
func TestReplicaDownAndUp(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		for _, mode := range []string{"memory", "shared-poll"} {
			t.Run(engine+"/"+mode, func(t *testing.T) { replicaDownAndUp(t, engine, mode == "shared-poll") })
		}
	}
}

// downProc is one process of TestReplicaDownAndUp: its *gorm.DB, its
// plugin's log and the decisions of its reads.
type downProc struct {
	name string
	db   *gorm.DB
	plug *plugin.Plugin
	logs syncBuffer

	mu        sync.Mutex
	decisions []plugin.Decision
}

func (p *downProc) record(_ context.Context, d plugin.Decision) {
	p.mu.Lock()
	p.decisions = append(p.decisions, d)
	p.mu.Unlock()
}

func (p *downProc) lastDecision() plugin.Decision {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.decisions) == 0 {
		return plugin.Decision{}
	}
	return p.decisions[len(p.decisions)-1]
}

func replicaDownAndUp(t *testing.T, engine string, shared bool) {
	e := newEngineEnv(t, engine)
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp()
	relay, replicas := e.throughRelay()
	// The env's own plugin keeps its in-memory store and direct replicas:
	// only the processes below reach the replica through the relay.
	var store lsnstore.Store = lsnstore.NewMemory()
	procs := []*downProc{{name: "the process"}}
	if shared {
		store, _ = newRedisStore(t, "down-"+t.Name())
		procs = []*downProc{{}, {}}
	}
	for _, p := range procs {
		p.db, p.plug = e.open(withStore(store), withConfig(func(c *plugin.Config) {
			c.Replicas = replicas
			c.Logger = slog.New(slog.NewTextHandler(&p.logs, nil))
			c.OnDecision = p.record
		}))
	}
	// downMsg is the part of its down warning that says how the process
	// learnt it: its own poll, or the shared poll's snapshot. A read of
	// its own that stalled on the cut (stalledMsg) may tell it first: the
	// poll or the snapshot then has no transition left to log.
	downMsg := map[*downProc]string{procs[0]: "replica is down (its poll failed)"}
	if shared {
		plugs := []*plugin.Plugin{procs[0].plug, procs[1].plug}
		h := oneLeader(t, plugs)
		holder, follower := procs[h], procs[1-h]
		holder.name, follower.name = "the poll's holder", "the follower"
		downMsg = map[*downProc]string{
			holder:   "replica is down (its poll failed)",
			follower: "replica is down (the fleet's shared poll reports it down",
		}
	}
	for _, p := range procs {
		got := e.eventuallyReplica(func() served { return e.readItem(p.db, 1) }, p.name+"'s read before the replica goes down")
		if got.Name != "old" {
			t.Fatalf("%s read %+v from the replica before it went down, want \"old\"", p.name, got)
		}
	}

	relay.Refuse(true)
	for _, p := range procs {
		waitLog(t, &p.logs, "replica is down (", p.name)
	}
	if err := setName(procs[len(procs)-1].db, 1); err != nil {
		t.Fatalf("a write while the replica is down: %v", err)
	}
	// Reads and polls for a while (the poll interval is 5 ms): each read
	// on the primary, no-replica, and nothing more in the log.
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		for _, p := range procs {
			for _, read := range []struct {
				what, want string
				do         func(*gorm.DB) served
			}{
				{"item 1, written while the replica is down", "new", func(db *gorm.DB) served { return e.readItem(db, 1) }},
				{"an untouched table", "untouched", e.readOther},
			} {
				got := read.do(p.db)
				if got.Name != read.want {
					t.Fatalf("%s read %s with the replica down: %+v, want %q", p.name, read.what, got, read.want)
				}
				e.mustPrimary(got, p.name+"'s read of "+read.what+" with the replica down")
				if d := p.lastDecision(); d.Reason != plugin.ReasonNoReplica || d.Target != plugin.Primary {
					t.Fatalf("%s read %s with the replica down: decision %+v, want the primary, %s", p.name, read.what, d, plugin.ReasonNoReplica)
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}

	relay.Refuse(false)
	for _, p := range procs {
		got := e.eventuallyReplica(func() served { return e.readItem(p.db, 1) }, p.name+"'s read once the replica is back")
		if got.Name != "new" {
			t.Fatalf("%s read %+v from the replica once it was back: stale, want \"new\"", p.name, got)
		}
		if d := p.lastDecision(); d.Reason != plugin.ReasonFresh || d.Replica != replicaName(0) {
			t.Fatalf("%s read once the replica is back: decision %+v, want %s on %s", p.name, d, plugin.ReasonFresh, replicaName(0))
		}
		waitLog(t, &p.logs, "replica is up again", p.name)
	}
	time.Sleep(100 * time.Millisecond) // more polls and snapshots say nothing more
	for _, p := range procs {
		log := p.logs.String()
		down := strings.Count(log, "replica is down")
		up := strings.Count(log, "replica is up again")
		// Once per transition: one down and one up for the cut. A poll
		// that times out on a loaded machine is a transition of its own
		// (a pair more), so up to three pairs pass; logging every poll or
		// read that sees it down would give dozens.
		if down < 1 || down > 3 || up != down || strings.Count(log, downMsg[p])+strings.Count(log, stalledMsg) < 1 || strings.Contains(log, "unreachable at start") {
			t.Fatalf("%s logged \"replica is down\" %d times and \"up again\" %d times, want once per transition (down as %q):\n%s", p.name, down, up, downMsg[p], log)
		}
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, "replica is down") && (!strings.Contains(line, "level=WARN") || !strings.Contains(line, "replica="+replicaName(0))) ||
				strings.Contains(line, "replica is up again") && (!strings.Contains(line, "level=INFO") || !strings.Contains(line, "replica="+replicaName(0))) {
				t.Fatalf("%s: want down at WARN and up again at INFO, naming the replica:\n%s", p.name, log)
			}
		}
	}
}

// stalledMsg is the down warning of a process whose read and ping found
// the replica stalled.
const stalledMsg = "replica is down (stalled"

// waitLog waits up to 15 s for logs to contain msg.
func waitLog(t *testing.T, logs *syncBuffer, msg, who string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(logs.String(), msg) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q within 15 s:\n%s", who, msg, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
