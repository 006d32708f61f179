package plugin

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// snapshotStore is a store whose shared poll returns what the test sets.
type snapshotStore struct {
	*lsnstore.Memory
	mu   sync.Mutex
	snap []byte
}

func (s *snapshotStore) PublishPoll(context.Context, string, time.Duration, []byte, time.Duration) (bool, error) {
	return false, nil
}

func (s *snapshotStore) SharedPoll(context.Context) ([]byte, time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap, 900 * time.Millisecond, nil
}

func (s *snapshotStore) ResignPoller(context.Context, string) error { return nil }

// follower is a plugin following the shared poll of a snapshotStore,
// with one replica, r0, on a database opened on a connector of the
// test's choosing; logs is its log.
type follower struct {
	p     *Plugin
	r     *replica
	sp    lsnstore.SharedPoller
	store *snapshotStore
	logs  bytes.Buffer
}

func newFollower(t *testing.T, c driver.Connector) *follower {
	t.Helper()
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	watchEndpoint(db, &endpoint{name: "r0", id: "server-r0", trusted: true})
	f := &follower{r: &replica{name: "r0", db: db}, store: &snapshotStore{Memory: lsnstore.NewMemory()}}
	f.p = &Plugin{}
	f.p.replicaSet.Store(&[]*replica{f.r})
	f.p.cfg.Store = f.store
	f.p.cfg.MaxLag = time.Minute
	f.p.cfg.StallTimeout = time.Second
	f.p.cfg.Logger = slog.New(slog.NewTextHandler(&f.logs, nil))
	f.p.depsCheckedAt = time.Now() // no dependents to refresh
	sp, ok := f.p.sharedPoller()
	if !ok {
		t.Fatal("the store is not a shared poller")
	}
	f.sp = sp
	return f
}

// setSnapshot makes the holder's snapshot report r0 up or down.
func (f *follower) setSnapshot(up bool) {
	b, err := json.Marshal(pollSnapshot{V: pollSnapshotVersion, TTL: 1000, Primary: lsnstore.PositionOf(0x6000).String(),
		Replicas: []snapshotReplica{{ID: "server-r0", Pos: lsnstore.PositionOf(0x5000).String(), Up: up, WithinLag: true}}})
	if err != nil {
		panic(err)
	}
	f.store.mu.Lock()
	f.store.snap = b
	f.store.mu.Unlock()
}

// TestFollowerLogsReplicaHealthOncePerTransition: a follower of the shared
// poll, which never queries the replica itself, logs the replica down and
// up again as the holder's snapshots report it, once per transition
// however many polls see it so, and a read no replica serves is
// no-replica while it is down.
func TestFollowerLogsReplicaHealthOncePerTransition(t *testing.T) {
	f := newFollower(t, bufferedConnector{})
	p, r, sp, logs, setSnapshot := f.p, f.r, f.sp, &f.logs, f.setSnapshot
	ctx := context.Background()
	count := func(msg string) int { return strings.Count(logs.String(), msg) }
	const down, upAgain = "level=WARN msg=\"freshread: replica is down", "level=INFO msg=\"freshread: replica is up again"

	// step makes the snapshot report the replica up or down, follows it
	// three times and checks the log said each message as often as want.
	step := func(up bool, wantDown, wantUp int, reason Reason) {
		t.Helper()
		setSnapshot(up)
		for range 3 {
			if !p.followOnce(ctx, sp) {
				t.Fatal("followOnce did not take the snapshot")
			}
		}
		if got := r.state.Load().up; got != up {
			t.Fatalf("replica up %v after following, want %v", got, up)
		}
		if n, m := count(down), count(upAgain); n != wantDown || m != wantUp {
			t.Fatalf("the log said down %d and up %d times, want %d and %d:\n%s", n, m, wantDown, wantUp, logs.String())
		}
		if got := p.laggingOrNone(); got != reason {
			t.Fatalf("replica up %v: reason %s, want %s", up, got, reason)
		}
	}
	step(true, 0, 0, ReasonLagging) // up from the start: nothing to say
	step(false, 1, 0, ReasonNoReplica)
	if !strings.Contains(logs.String(), "replica=r0") {
		t.Fatalf("the warning does not name the replica:\n%s", logs.String())
	}
	step(true, 1, 1, ReasonLagging)
	step(false, 2, 1, ReasonNoReplica)
}

// TestFollowerKeepsAStalledReplicaDown: a follower of the shared poll
// whose read found the replica stalled (a ping unanswered) keeps it down
// whatever the holder's snapshots say for replicaRetryAfter (a snapshot
// taken before the stall says up), and logs one down transition, as
// "replica is down", and one up again once it takes the replica back.
func TestFollowerKeepsAStalledReplicaDown(t *testing.T) {
	f := newFollower(t, noConnector{}) // every ping fails
	p, r, sp, logs := f.p, f.r, f.sp, &f.logs
	f.setSnapshot(true)
	ctx := context.Background()
	if !p.followOnce(ctx, sp) || !r.state.Load().up {
		t.Fatal("the follower did not take the replica up from the snapshot")
	}

	for range 2 { // a second stalled read says nothing more
		if p.pingReplica(r, time.Now(), 50*time.Millisecond) {
			t.Fatal("the ping of a replica that refuses connections answered")
		}
	}
	for range 3 {
		if !p.followOnce(ctx, sp) {
			t.Fatal("followOnce did not take the snapshot")
		}
		if r.state.Load().up {
			t.Fatal("a snapshot that says up brought back a replica that stalled here just now")
		}
	}
	const down, upAgain = "level=WARN msg=\"freshread: replica is down (stalled", "level=INFO msg=\"freshread: replica is up again"
	if n, m := strings.Count(logs.String(), down), strings.Count(logs.String(), upAgain); n != 1 || m != 0 {
		t.Fatalf("the log said down %d and up %d times, want 1 and 0:\n%s", n, m, logs.String())
	}

	r.failed.Store(time.Now().Add(-replicaRetryAfter).UnixNano()) // the retry wait is over
	if !p.followOnce(ctx, sp) || !r.state.Load().up {
		t.Fatal("the follower did not take the replica back once replicaRetryAfter had passed")
	}
	if n, m := strings.Count(logs.String(), down), strings.Count(logs.String(), upAgain); n != 1 || m != 1 {
		t.Fatalf("the log said down %d and up %d times, want 1 and 1:\n%s", n, m, logs.String())
	}
}
