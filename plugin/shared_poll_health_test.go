package plugin

import (
	"bytes"
	"context"
	"database/sql"
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

// TestFollowerLogsReplicaHealthOncePerTransition: a follower of the shared
// poll, which never queries the replica itself, logs the replica down and
// up again as the holder's snapshots report it, once per transition
// however many polls see it so, and a read no replica serves is
// no-replica while it is down.
func TestFollowerLogsReplicaHealthOncePerTransition(t *testing.T) {
	db := sql.OpenDB(bufferedConnector{})
	defer db.Close()
	watchEndpoint(db, &endpoint{name: "r0", id: "server-r0", trusted: true})
	r := &replica{name: "r0", db: db}
	store := &snapshotStore{Memory: lsnstore.NewMemory()}
	var logs bytes.Buffer
	p := &Plugin{}
	p.replicaSet.Store(&[]*replica{r})
	p.cfg.Store = store
	p.cfg.MaxLag = time.Minute
	p.cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	p.depsCheckedAt = time.Now() // no dependents to refresh
	sp, ok := p.sharedPoller()
	if !ok {
		t.Fatal("the store is not a shared poller")
	}
	ctx := context.Background()
	setSnapshot := func(up bool) {
		b, err := json.Marshal(pollSnapshot{V: pollSnapshotVersion, TTL: 1000, Primary: lsnstore.PositionOf(0x6000).String(),
			Replicas: []snapshotReplica{{ID: "server-r0", Pos: lsnstore.PositionOf(0x5000).String(), Up: up, WithinLag: true}}})
		if err != nil {
			t.Fatal(err)
		}
		store.mu.Lock()
		store.snap = b
		store.mu.Unlock()
	}
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
