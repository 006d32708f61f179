package plugin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// A SessionState remembers the highest write position of one caller (a user,
// a request chain) per database cluster, so that the caller's reads see its
// own writes (read-your-writes) even when other callers' writes do not
// matter. It travels in a context.Context (WithSession) and across requests
// as a token (Token, ParseToken, Middleware). Safe for concurrent use.
type SessionState struct {
	mu sync.Mutex
	// positions by cluster: the primary's system identifier, because
	// positions of different clusters cannot be compared. They are this
	// process's own writes: trusted.
	positions map[uint64]lsnstore.Position
	// claims are the positions a token brought (ParseToken, Middleware):
	// the client's word, checked against the primary's position before a
	// read relies on one (session_cap.go); checked marks those that passed.
	claims  map[uint64]lsnstore.Position
	checked map[uint64]bool
	// received is when the token was parsed: a primary position read after
	// it covers every genuine claim (docs/design/sessions.md).
	received time.Time
	// ignored says why the token, or a part of it, was ignored (a label of
	// freshread_session_tokens_ignored_total); reported by the first plugin
	// that routes a read of the session.
	ignored  string
	reported bool
	// lastWrite is the time of the session's last write (unix ms), for
	// Config.StickyWindow.
	lastWrite int64
}

type sessionKey struct{}
type consistencyKey struct{}

// WithSession returns a context carrying a new, empty session, or ctx itself
// when it already carries one.
func WithSession(ctx context.Context) context.Context {
	if SessionFrom(ctx) != nil {
		return ctx
	}
	return ContextWithSession(ctx, &SessionState{})
}

// ContextWithSession returns a context carrying s.
func ContextWithSession(ctx context.Context, s *SessionState) context.Context {
	return context.WithValue(ctx, sessionKey{}, s)
}

// SessionFrom returns the session ctx carries, or nil.
func SessionFrom(ctx context.Context) *SessionState {
	if ctx == nil {
		return nil
	}
	s, _ := ctx.Value(sessionKey{}).(*SessionState)
	return s
}

// WithConsistency returns a context whose reads use level c instead of
// Config.Consistency.
func WithConsistency(ctx context.Context, c Consistency) context.Context {
	return context.WithValue(ctx, consistencyKey{}, c)
}

func consistencyFrom(ctx context.Context, def Consistency) Consistency {
	if ctx == nil {
		return def
	}
	if c, ok := ctx.Value(consistencyKey{}).(Consistency); ok {
		return c
	}
	return def
}

// position is the session's position on cluster: its own writes' and its
// token's claim, unchecked (the plugin reads it through sessionPosition,
// which checks the claim).
func (s *SessionState) position(cluster uint64) lsnstore.Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.positions[cluster].Merge(s.claims[cluster])
}

func (s *SessionState) raise(cluster uint64, pos lsnstore.Position) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.positions == nil {
		s.positions = make(map[uint64]lsnstore.Position, 1)
	}
	s.positions[cluster] = s.positions[cluster].Merge(pos)
}

// wrote records that the session wrote at t.
func (s *SessionState) wrote(t time.Time) {
	s.mu.Lock()
	if ms := t.UnixMilli(); ms > s.lastWrite {
		s.lastWrite = ms
	}
	s.mu.Unlock()
}

// wroteWithin reports whether the session wrote less than d before now.
func (s *SessionState) wroteWithin(now time.Time, d time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastWrite > 0 && now.UnixMilli()-s.lastWrite < d.Milliseconds()
}

// Empty reports whether the session has recorded no write.
func (s *SessionState) Empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.positions) == 0 && len(s.claims) == 0 && s.lastWrite == 0
}

// Token serializes the session: "v1", then ".w=<unix ms>" when it has
// written, then ".<cluster>=<position>" per cluster (lsnstore.Position's
// text), e.g. "v1.w=1764430000000.7312345678901234567=0/3000148" or, with
// MariaDB GTID domains 0 and 1, "...=0/64+1=0/14" (cookie-safe). It holds
// positions and a time only, no secrets, and no signature: Middleware
// with MiddlewareConfig.Keys appends one.
func (s *SessionState) Token() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := make(map[uint64]lsnstore.Position, len(s.positions)+len(s.claims))
	for c, pos := range s.claims {
		all[c] = pos
	}
	for c, pos := range s.positions {
		all[c] = all[c].Merge(pos)
	}
	clusters := make([]uint64, 0, len(all))
	for c := range all {
		clusters = append(clusters, c)
	}
	sort.Slice(clusters, func(i, j int) bool { return clusters[i] < clusters[j] })
	var b strings.Builder
	b.WriteString("v1")
	if s.lastWrite > 0 {
		fmt.Fprintf(&b, ".w=%d", s.lastWrite)
	}
	for _, c := range clusters {
		fmt.Fprintf(&b, ".%d=%s", c, all[c])
	}
	return b.String()
}

// ErrBadToken: a session token could not be parsed.
var ErrBadToken = errors.New("plugin: malformed session token")

// maxWriteTimeSkew is how far in the future a token's write time may be
// (the clocks of the processes that wrote and that read it differ); a
// later one is ignored, else it would keep Config.StickyWindow open.
const maxWriteTimeSkew = time.Minute

// ParseToken parses a token made by Token. An empty string is an empty
// session. The token's positions are the client's word: before a read
// relies on one, the plugin checks that it is not beyond the primary's
// position (a position beyond it is ignored: docs/design/sessions.md). A
// write time more than a minute in the future is ignored. ParseToken
// checks no signature: Middleware does, with MiddlewareConfig.Keys.
func ParseToken(tok string) (*SessionState, error) {
	now := time.Now()
	s := &SessionState{received: now}
	if tok == "" {
		return s, nil
	}
	parts := strings.Split(tok, ".")
	if parts[0] != "v1" || len(parts) > 65 {
		return nil, fmt.Errorf("%w: unknown version", ErrBadToken)
	}
	for _, p := range parts[1:] {
		c, pos, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("%w: entry without '='", ErrBadToken)
		}
		if c == "w" {
			ms, err := strconv.ParseInt(pos, 10, 64)
			if err != nil || ms <= 0 {
				return nil, fmt.Errorf("%w: bad write time", ErrBadToken)
			}
			if ms > now.Add(maxWriteTimeSkew).UnixMilli() {
				s.ignored = ignoredFutureWrite
				continue
			}
			s.lastWrite = ms
			continue
		}
		cluster, err := strconv.ParseUint(c, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: bad cluster id", ErrBadToken)
		}
		p, err := lsnstore.ParsePosition(pos)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadToken, err)
		}
		s.claim(cluster, p)
	}
	return s, nil
}
