package plugin

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// A session token is the client's word (docs/design/sessions.md): the
// positions it brings are claims, and before a read relies on one the
// plugin checks that it is not beyond the primary's position as read after
// the token arrived. No genuine claim can be beyond that (the write it
// records committed before the token was handed out), so a claim beyond it
// is forged or altered and is ignored: the read is routed as if the token
// had no position for this database.

// Why a token, or part of it, was ignored: the labels of
// freshread_session_tokens_ignored_total.
const (
	ignoredBadSignature  = "bad-signature"     // no valid MAC with MiddlewareConfig.Keys set
	ignoredMalformed     = "malformed"         // not a token ParseToken accepts
	ignoredBeyondPrimary = "beyond-primary"    // a position past the primary's
	ignoredOtherDatabase = "other-database"    // positions of other databases only
	ignoredFutureWrite   = "future-write-time" // a write time more than maxWriteTimeSkew ahead
)

var ignoredReasons = [...]string{ignoredBadSignature, ignoredMalformed, ignoredBeyondPrimary, ignoredOtherDatabase, ignoredFutureWrite}

// sessionGuard is the plugin's state for checking session tokens: the
// primary positions read for the check, the counters of ignored tokens,
// and the fallback share of sessions (fallback_limit.go).
type sessionGuard struct {
	mu sync.Mutex
	// last is the newest primary read that succeeded; cur the one in
	// flight, nil when none.
	last, cur *primaryRead

	ignored [len(ignoredReasons)]atomic.Uint64
	// refused counts fallbacks caused by a token refused by the sessions'
	// share of Config.MaxFallbackRate.
	refused atomic.Uint64

	shareOnce sync.Once
	share     *fallbackLimiter
}

// primaryRead is one read of the primary's position, shared by every
// check that needs one started after its token arrived.
type primaryRead struct {
	started time.Time
	done    chan struct{}
	pos     lsnstore.Position
	err     error
}

var errNoPrimaryCheck = errors.New("plugin: the primary's position cannot be read")

// claim records pos, a token's position on cluster, as a claim.
func (s *SessionState) claim(cluster uint64, pos lsnstore.Position) {
	if s.claims == nil {
		s.claims = make(map[uint64]lsnstore.Position, 1)
	}
	s.claims[cluster] = s.claims[cluster].Merge(pos)
}

// claimOn returns the session's own position on cluster, its token's claim,
// whether the claim was checked already, and when the token arrived.
func (s *SessionState) claimOn(cluster uint64) (own, claim lsnstore.Position, checked bool, received time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.positions[cluster], s.claims[cluster], s.checked[cluster], s.received
}

// settle records the check of cluster's claim: kept, or dropped (it is
// then neither relied on nor sent back in the next token).
func (s *SessionState) settle(cluster uint64, keep bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !keep {
		delete(s.claims, cluster)
		return
	}
	if s.checked == nil {
		s.checked = make(map[uint64]bool, 1)
	}
	s.checked[cluster] = true
}

// checkedClaim is cluster's claim once checked, else zero.
func (s *SessionState) checkedClaim(cluster uint64) lsnstore.Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.checked[cluster] {
		return lsnstore.Position{}
	}
	return s.claims[cluster]
}

// toReport returns, once per session, why its token was ignored (empty
// when it was not), and whether its claims are all of clusters other than
// cluster (a token of another database, or of an application with
// several).
func (s *SessionState) toReport(cluster uint64) (why string, other bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reported {
		return "", false
	}
	s.reported = true
	_, mine := s.claims[cluster]
	return s.ignored, len(s.claims) > 0 && !mine && len(s.positions) == 0
}

// sessionPosition is the position a read of session s must wait for on
// this plugin's database: its own writes', and its token's claim unless
// the claim is beyond the primary's position read after the token arrived.
func (p *Plugin) sessionPosition(ctx context.Context, s *SessionState) lsnstore.Position {
	if why, other := s.toReport(p.cluster); why != "" || other {
		if why != "" {
			p.ignoredToken(ctx, why)
		}
		if other {
			p.ignoredToken(ctx, ignoredOtherDatabase)
		}
	}
	own, claim, checked, received := s.claimOn(p.cluster)
	if checked || claim.IsZero() {
		return own.Merge(claim)
	}
	if last := p.lastPrimary.Load(); last != nil && last.Covers(claim) {
		// Not beyond the primary as last polled: never beyond it later.
		s.settle(p.cluster, true)
		return own.Merge(claim)
	}
	primary, err := p.primarySince(ctx, received)
	if err != nil {
		// Unchecked, the claim is relied on as it always was: the read
		// waits for it (the primary, or MaxWait), never stale.
		if p.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
			p.cfg.Logger.DebugContext(ctx, "freshread: session token not checked against the primary", "claim", claim.String(), "err", err)
		}
		return own.Merge(claim)
	}
	if primary.Covers(claim) {
		s.settle(p.cluster, true)
		return own.Merge(claim)
	}
	s.settle(p.cluster, false)
	p.ignoredToken(ctx, ignoredBeyondPrimary, "claim", claim.String(), "primary", primary.String())
	return own
}

// ignoredToken counts and logs (debug) a token, or part of one, ignored
// for why.
func (p *Plugin) ignoredToken(ctx context.Context, why string, args ...any) {
	for i, r := range ignoredReasons {
		if r == why {
			p.sessions.ignored[i].Add(1)
		}
	}
	if p.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
		p.cfg.Logger.DebugContext(ctx, "freshread: session token ignored", append([]any{"reason", why}, args...)...)
	}
}

// primarySince returns the primary's position as read by a query sent at
// or after since: a finished read when one qualifies, else the read in
// flight when it does, else a new one. One read serves every check that
// waits meanwhile, so the primary takes at most one such query at a time.
func (p *Plugin) primarySince(ctx context.Context, since time.Time) (lsnstore.Position, error) {
	if p.engine == nil || p.primaryDB == nil {
		return lsnstore.Position{}, errNoPrimaryCheck
	}
	g := &p.sessions
	g.mu.Lock()
	if l := g.last; l != nil && !l.started.Before(since) {
		g.mu.Unlock()
		return l.pos, nil
	}
	r := g.cur
	if r == nil || r.started.Before(since) {
		r = &primaryRead{started: time.Now(), done: make(chan struct{})}
		g.cur = r
		go p.readPrimary(r)
	}
	g.mu.Unlock()
	select {
	case <-r.done:
		return r.pos, r.err
	case <-ctx.Done():
		return lsnstore.Position{}, ctx.Err()
	}
}

// readPrimary runs r, bounded like a poll, independent of the reads that
// wait for it.
func (p *Plugin) readPrimary(r *primaryRead) {
	parent := p.life
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, p.pollTimeout())
	defer cancel()
	r.pos, _, r.err = p.engine.primaryPositions(ctx, p.primaryDB)
	g := &p.sessions
	g.mu.Lock()
	if r.err == nil && (g.last == nil || g.last.started.Before(r.started)) {
		g.last = r
	}
	if g.cur == r {
		g.cur = nil
	}
	g.mu.Unlock()
	close(r.done)
}

// tokenCaused reports whether the read of ctx falls back because of its
// session token: no usable replica has replayed the token's (checked)
// claim on this database.
func (p *Plugin) tokenCaused(ctx context.Context) bool {
	s := SessionFrom(ctx)
	if s == nil {
		return false
	}
	claim := s.checkedClaim(p.cluster)
	if claim.IsZero() {
		return false
	}
	now := time.Now()
	for _, r := range p.replicas() {
		if st := r.state.Load(); st.usable(now, p.cfg.MaxLag) && st.pos.Covers(claim) {
			return false
		}
	}
	return true
}
