package plugin

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// stallingEngine answers replayPosition at once, except for the replica
// stalled, whose read blocks until release is closed (whatever its
// context says: a connection that stalls does not see it).
type stallingEngine struct {
	engine
	stalled *sql.DB
	release chan struct{}
	asked   atomic.Int32 // reads of the stalled replica
}

func (e *stallingEngine) replayPosition(_ context.Context, db *sql.DB) (lsnstore.Position, error) {
	if db == e.stalled {
		e.asked.Add(1)
		<-e.release
		return lsnstore.Position{}, errors.New("stalled connection")
	}
	return lsnstore.PositionOf(0x5000), nil
}

// TestPollNotHeldByAStalledReplica: a poll goes on, with the healthy
// replica's answer, while another replica's read hangs, and does not ask
// the stalled one again while its read is out; its answer, when it comes,
// is stored.
func TestPollNotHeldByAStalledReplica(t *testing.T) {
	dummy := func() *sql.DB {
		db := sql.OpenDB(bufferedConnector{})
		t.Cleanup(func() { db.Close() })
		return db
	}
	stalled, healthy := &replica{name: "r0", db: dummy()}, &replica{name: "r1", db: dummy()}
	eng := &stallingEngine{stalled: stalled.db, release: make(chan struct{})}
	p := &Plugin{engine: eng}
	p.replicaSet.Store(&[]*replica{stalled, healthy})
	p.cfg.PollInterval = 5 * time.Millisecond
	p.cfg.MaxLag = time.Minute
	p.cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil)) // the stalled replica's failure is logged
	ctx := context.Background()
	pv := primaryView{ok: true, ins: lsnstore.PositionOf(0x6000), flush: lsnstore.PositionOf(0x6000), threshold: lsnstore.PositionOf(0x4000)}

	for range 3 {
		// Each poll returns though r0 never answers; r1's answer is
		// stored by its goroutine whenever it comes (a loaded machine
		// may take longer than the poll waits).
		if got := p.pollReplicas(ctx, nil, pv, false); len(got) > 1 || !got["r0"].Equal(lsnstore.Position{}) {
			t.Fatalf("a poll with r0 stalled published %v for it", got)
		}
		for healthy.polling.Load() {
			time.Sleep(time.Millisecond)
		}
		if !healthy.state.Load().usable(time.Now(), p.cfg.MaxLag) {
			t.Fatal("the healthy replica is not usable while the other stalls")
		}
	}
	if n := eng.asked.Load(); n != 1 {
		t.Fatalf("the stalled replica was asked %d times while its read was out, want 1", n)
	}
	close(eng.release)
	for stalled.polling.Load() {
		time.Sleep(time.Millisecond)
	}
	if st := stalled.state.Load(); st == nil || st.up {
		t.Fatalf("the stalled replica's failed read left state %+v, want down", st)
	}
	p.wg.Wait()
}
