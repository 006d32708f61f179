package plugin

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/driver/postgres"

	"github.com/freshread/freshread/lsnstore"
)

// flappingEngine's replayPosition fails while down is set, with an error
// that quotes the replica's DSN (as a careless driver could).
type flappingEngine struct {
	engine
	down atomic.Bool
	dsn  string
}

func (e *flappingEngine) replayPosition(context.Context, *sql.DB) (lsnstore.Position, error) {
	if e.down.Load() {
		return lsnstore.Position{}, errors.New("cannot connect to " + e.dsn + ": connection refused")
	}
	return lsnstore.PositionOf(0x5000), nil
}

// TestReplicaHealthLoggedOncePerTransition: a replica unreachable at the
// first poll is said once at WARN with its name and the cause (without
// its DSN or password), then up and down again once each however many
// polls see it so; while it is down a read no replica serves is
// no-replica, not lagging.
func TestReplicaHealthLoggedOncePerTransition(t *testing.T) {
	const dsn = "postgres://app:s3cr3t-pw@10.0.0.9:5432/shop?sslmode=disable"
	db := sql.OpenDB(bufferedConnector{})
	defer db.Close()
	eng := &flappingEngine{dsn: dsn}
	r := &replica{name: "r0", db: db, secrets: dsnSecrets(postgres.Open(dsn))}
	var logs bytes.Buffer
	p := &Plugin{engine: eng}
	p.replicaSet.Store(&[]*replica{r})
	p.cfg.PollInterval = 5 * time.Millisecond
	p.cfg.MaxLag = time.Minute
	p.cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	ctx := context.Background()
	pv := primaryView{ok: true, ins: lsnstore.PositionOf(0x6000), flush: lsnstore.PositionOf(0x6000), threshold: lsnstore.PositionOf(0x4000)}
	polls := func(n int) {
		for range n {
			p.pollReplicas(ctx, nil, pv, true)
			for r.polling.Load() { // its goroutine is done with the read
				time.Sleep(time.Millisecond)
			}
		}
	}
	count := func(msg string) int { return strings.Count(logs.String(), msg) }

	// step sets the replica down or up, polls three times and checks the
	// log said msg once, and what a read no replica serves is.
	step := func(down bool, msg string, reason Reason) {
		t.Helper()
		eng.down.Store(down)
		polls(3)
		if n := count(msg); n != 1 {
			t.Fatalf("%q said %d times, want 1:\n%s", msg, n, logs.String())
		}
		if got := p.laggingOrNone(); got != reason {
			t.Fatalf("replica down %v: reason %s, want %s", down, got, reason)
		}
		if log := logs.String(); strings.Contains(log, "s3cr3t-pw") || strings.Contains(log, "10.0.0.9") {
			t.Fatalf("the log shows the replica's DSN or password:\n%s", log)
		}
	}
	step(true, "level=WARN msg=\"freshread: replica unreachable at start", ReasonNoReplica)
	if log := logs.String(); !strings.Contains(log, "replica=r0") || !strings.Contains(log, "connection refused") {
		t.Fatalf("the warning names neither the replica nor the cause:\n%s", log)
	}
	step(false, "level=INFO msg=\"freshread: replica is up again", ReasonLagging)
	step(true, "level=WARN msg=\"freshread: replica is down", ReasonNoReplica)
	p.wg.Wait()
}

// failingPrimary's primaryPositions fails while down is set, with an
// error that quotes the primary's DSN (as a careless driver could).
type failingPrimary struct {
	engine
	down atomic.Bool
	dsn  string
}

func (e *failingPrimary) primaryPositions(context.Context, *sql.DB) (ins, flush lsnstore.Position, err error) {
	if e.down.Load() {
		return ins, flush, errors.New("cannot connect to " + e.dsn + ": connection refused")
	}
	return lsnstore.PositionOf(0x6000), lsnstore.PositionOf(0x6000), nil
}

// TestPrimaryPollFailureLoggedOncePerTransition: a poll of the primary
// that fails is said once at WARN with the cause (without the primary's
// DSN or password) however many polls fail, and once at INFO when a poll
// answers again; a second failing spell is said again.
func TestPrimaryPollFailureLoggedOncePerTransition(t *testing.T) {
	const dsn = "postgres://app:s3cr3t-pw@10.0.0.7:5432/shop?sslmode=disable"
	eng := &failingPrimary{dsn: dsn}
	var logs bytes.Buffer
	p := &Plugin{engine: eng, primarySecrets: dsnSecrets(postgres.Open(dsn))}
	tick := make(chan struct{})
	p.tick.Store(&tick)
	p.cfg.PollInterval = 5 * time.Millisecond
	p.cfg.MaxLag = time.Minute
	p.cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	p.depsCheckedAt = time.Now() // no dependents to refresh
	const failing, answering = "level=WARN msg=\"freshread: cannot poll the primary's position", "level=INFO msg=\"freshread: the primary answers its poll again"
	step := func(down bool, wantFailing, wantAnswering int) {
		t.Helper()
		eng.down.Store(down)
		for range 3 {
			p.pollOnce(context.Background(), true)
		}
		log := logs.String()
		if n, m := strings.Count(log, failing), strings.Count(log, answering); n != wantFailing || m != wantAnswering {
			t.Fatalf("the log said failing %d and answering %d times, want %d and %d:\n%s", n, m, wantFailing, wantAnswering, log)
		}
		if strings.Contains(log, "s3cr3t-pw") || strings.Contains(log, "10.0.0.7") {
			t.Fatalf("the log shows the primary's DSN or password:\n%s", log)
		}
	}
	step(false, 0, 0)
	step(true, 1, 0)
	if !strings.Contains(logs.String(), "connection refused") {
		t.Fatalf("the warning does not give the cause:\n%s", logs.String())
	}
	step(false, 1, 1)
	step(true, 2, 1)
}
