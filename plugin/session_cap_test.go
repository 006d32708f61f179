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

	"github.com/freshread/freshread/lsnstore"
)

// primaryEngine answers primaryPositions with pos (or err), counting the
// reads.
type primaryEngine struct {
	engine
	pos   atomic.Pointer[lsnstore.Position]
	err   error
	reads atomic.Int32
}

func (e *primaryEngine) primaryPositions(context.Context, *sql.DB) (lsnstore.Position, lsnstore.Position, error) {
	e.reads.Add(1)
	pos := *e.pos.Load()
	return pos, pos, e.err
}

// capPlugin is a plugin of cluster 7 whose poller last saw the primary at
// polled, whose primary is now at current, with one replica at replayed;
// its debug log goes to the returned buffer.
func capPlugin(t *testing.T, polled, current, replayed uint64) (*Plugin, *primaryEngine, *bytes.Buffer) {
	t.Helper()
	db := sql.OpenDB(bufferedConnector{})
	t.Cleanup(func() { db.Close() })
	eng := &primaryEngine{}
	cur := lsnstore.PositionOf(lsnstore.LSN(current))
	eng.pos.Store(&cur)
	var log bytes.Buffer
	p := &Plugin{engine: eng, primaryDB: db, cluster: 7}
	p.cfg.PollInterval = 20 * time.Millisecond
	p.cfg.MaxLag = time.Minute
	p.cfg.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	last := lsnstore.PositionOf(lsnstore.LSN(polled))
	p.lastPrimary.Store(&last)
	r := &replica{name: "r0"}
	r.pool = &replicaPool{r: r}
	r.state.Store(&replicaState{pos: lsnstore.PositionOf(lsnstore.LSN(replayed)), up: true, withinLag: true, polledAt: time.Now()})
	p.replicaSet.Store(&[]*replica{r})
	return p, eng, &log
}

func mustToken(t *testing.T, tok string) *SessionState {
	t.Helper()
	s, err := ParseToken(tok)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestMaximalPositionIgnored: a position past the primary's (maximal, or
// 4 GiB ahead) is ignored after one read of the primary's position, and
// counted, logged and dropped from the next token; the read then needs
// nothing of the session and a replica serves it.
func TestMaximalPositionIgnored(t *testing.T) {
	for _, tok := range []string{"v1.7=FFFFFFFF/FFFFFFFF", "v1.7=1/3000000"} {
		p, eng, log := capPlugin(t, 0x3000000, 0x3000100, 0x2FFFF00)
		s := mustToken(t, tok)
		if got := p.sessionPosition(context.Background(), s); !got.IsZero() {
			t.Fatalf("%s: the read must wait for %v, want nothing", tok, got)
		}
		if eng.reads.Load() != 1 {
			t.Fatalf("%s: %d reads of the primary, want 1", tok, eng.reads.Load())
		}
		if n := p.sessions.ignored[2].Load(); ignoredReasons[2] != ignoredBeyondPrimary || n != 1 {
			t.Fatalf("%s: beyond-primary counted %d times", tok, n)
		}
		if !strings.Contains(log.String(), "session token ignored") || !strings.Contains(log.String(), "reason=beyond-primary") {
			t.Fatalf("%s: debug log %q", tok, log.String())
		}
		if s.Token() != "v1" {
			t.Fatalf("%s: next token %q still claims the position", tok, s.Token())
		}
		// The session is settled: the next read asks nothing.
		if got := p.sessionPosition(context.Background(), s); !got.IsZero() || eng.reads.Load() != 1 {
			t.Fatalf("%s: second read: %v, %d reads of the primary", tok, got, eng.reads.Load())
		}
		if pool, _ := p.freshReplica(p.sessionPosition(context.Background(), s)); pool == nil {
			t.Fatalf("%s: no replica serves the session", tok)
		}
	}
}

// TestGenuinePositionKept: a position the poller's last primary position
// covers is kept without asking the primary; one past it but not past the
// primary's position read after the token arrived (a write since the last
// poll) is kept too: lowering it could make the read stale.
func TestGenuinePositionKept(t *testing.T) {
	p, eng, _ := capPlugin(t, 0x3000000, 0x3000100, 0x2FFFF00)
	s := mustToken(t, "v1.7=0/3000000")
	if got := p.sessionPosition(context.Background(), s); !got.Equal(lsnstore.PositionOf(0x3000000)) || eng.reads.Load() != 0 {
		t.Fatalf("polled-covered claim: %v, %d reads", got, eng.reads.Load())
	}
	s = mustToken(t, "v1.7=0/3000100")
	if got := p.sessionPosition(context.Background(), s); !got.Equal(lsnstore.PositionOf(0x3000100)) || eng.reads.Load() != 1 {
		t.Fatalf("claim of a write since the poll: %v, %d reads", got, eng.reads.Load())
	}
	// The session's own writes in this process are never checked.
	s = mustToken(t, "")
	s.raise(7, lsnstore.PositionOf(0xFFFFFFFF00))
	if got := p.sessionPosition(context.Background(), s); !got.Equal(lsnstore.PositionOf(0xFFFFFFFF00)) {
		t.Fatalf("own write: %v", got)
	}
}

// TestPrimaryReadAfterToken: a read of the primary's position that
// started before the token arrived does not judge it (the write may have
// committed after it): a new one is made; one started after it is
// reused.
func TestPrimaryReadAfterToken(t *testing.T) {
	p, eng, _ := capPlugin(t, 0x100, 0x3000000, 0x100)
	// The last read saw 0x200, before the token arrived.
	p.sessions.last = &primaryRead{started: time.Now(), pos: lsnstore.PositionOf(0x200)}
	time.Sleep(time.Millisecond)
	s := mustToken(t, "v1.7=0/3000000")
	if got := p.sessionPosition(context.Background(), s); !got.Equal(lsnstore.PositionOf(0x3000000)) || eng.reads.Load() != 1 {
		t.Fatalf("claim past an old read of the primary: %v, %d reads", got, eng.reads.Load())
	}
	// A later token is judged by the read made after it arrived.
	s = mustToken(t, "v1.7=0/3000001")
	if got := p.sessionPosition(context.Background(), s); !got.IsZero() || eng.reads.Load() != 2 {
		t.Fatalf("claim past the primary: %v, %d reads", got, eng.reads.Load())
	}
	// Tokens that arrived before that read are judged by it.
	s1, s2 := mustToken(t, "v1.7=0/3000002"), mustToken(t, "v1.7=0/2000000")
	time.Sleep(time.Millisecond)
	p.sessionPosition(context.Background(), mustToken(t, "v1.7=0/3000003"))
	n := eng.reads.Load()
	if got := p.sessionPosition(context.Background(), s1); !got.IsZero() {
		t.Fatalf("s1: %v", got)
	}
	if got := p.sessionPosition(context.Background(), s2); !got.Equal(lsnstore.PositionOf(0x2000000)) {
		t.Fatalf("s2: %v", got)
	}
	if eng.reads.Load() != n {
		t.Fatalf("%d reads of the primary for tokens that arrived before the last, want none", eng.reads.Load()-n)
	}
}

// TestUncheckedClaimKept: when the primary's position cannot be read, the
// claim is relied on as before (the read waits for it: never stale).
func TestUncheckedClaimKept(t *testing.T) {
	p, eng, _ := capPlugin(t, 0x100, 0x100, 0x100)
	eng.err = errors.New("connection refused")
	s := mustToken(t, "v1.7=FFFFFFFF/FFFFFFFF")
	if got := p.sessionPosition(context.Background(), s); !got.Equal(lsnstore.PositionOf(0xFFFFFFFFFFFFFFFF)) {
		t.Fatalf("claim with the primary unreachable: %v", got)
	}
	p.engine = nil
	if got := p.sessionPosition(context.Background(), s); got.IsZero() {
		t.Fatal("claim without an engine was dropped")
	}
}

// TestOtherDatabaseToken: a token with positions of another database
// only requires nothing here, is counted once and logged.
func TestOtherDatabaseToken(t *testing.T) {
	p, eng, log := capPlugin(t, 0x100, 0x100, 0x100)
	s := mustToken(t, "v1.9=FFFFFFFF/FFFFFFFF")
	for range 3 {
		if got := p.sessionPosition(context.Background(), s); !got.IsZero() {
			t.Fatalf("other database's token: %v", got)
		}
	}
	if n := p.sessions.ignored[3].Load(); ignoredReasons[3] != ignoredOtherDatabase || n != 1 {
		t.Fatalf("other-database counted %d times", n)
	}
	if eng.reads.Load() != 0 || !strings.Contains(log.String(), "reason=other-database") {
		t.Fatalf("%d reads of the primary, log %q", eng.reads.Load(), log.String())
	}
	// The token keeps it, for the application's other database.
	if s.Token() != "v1.9=FFFFFFFF/FFFFFFFF" {
		t.Fatalf("next token %q", s.Token())
	}
}

// TestTokenFallbackShare: fallbacks caused by a session token draw from
// half the budget; once it is spent, such reads are refused while other
// fallbacks still have the other half.
func TestTokenFallbackShare(t *testing.T) {
	p, _, _ := capPlugin(t, 0x1000, 0x1000, 0x100)
	p.fallbacks = newFallbackLimiter(0.001, 4) // a burst of 4, then one per 1000 s
	s := mustToken(t, "v1.7=0/1000")
	ctx := ContextWithSession(context.Background(), s)
	if got := p.sessionPosition(ctx, s); !got.Equal(lsnstore.PositionOf(0x1000)) {
		t.Fatalf("claim %v", got)
	}
	for i := range 2 {
		if err := p.limitedFallback(ctx, ReasonLagging); err != nil {
			t.Fatalf("token fallback %d: %v", i, err)
		}
	}
	if err := p.limitedFallback(ctx, ReasonLagging); !IsFallbackLimited(err) {
		t.Fatalf("third token fallback: %v, want ErrFallbackLimited", err)
	}
	if p.sessions.refused.Load() != 1 {
		t.Fatalf("token refusals %d", p.sessions.refused.Load())
	}
	// A token a replica has replayed causes no fallback of its own.
	covered := mustToken(t, "v1.7=0/100")
	cctx := ContextWithSession(context.Background(), covered)
	p.sessionPosition(cctx, covered)
	for i, c := range []context.Context{context.Background(), cctx} {
		if err := p.limitedFallback(c, ReasonLagging); err != nil {
			t.Fatalf("other fallback %d: %v", i, err)
		}
	}
	if err := p.limitedFallback(context.Background(), ReasonLagging); !IsFallbackLimited(err) {
		t.Fatalf("fifth fallback: %v, want ErrFallbackLimited", err)
	}
}
