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
	// positions of different clusters cannot be compared.
	positions map[uint64]lsnstore.Position
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

func (s *SessionState) position(cluster uint64) lsnstore.Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.positions[cluster]
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
	return len(s.positions) == 0 && s.lastWrite == 0
}

// Token serializes the session: "v1", then ".w=<unix ms>" when it has
// written, then ".<cluster>=<position>" per cluster (lsnstore.Position's
// text), e.g. "v1.w=1764430000000.7312345678901234567=0/3000148" or, with
// MariaDB GTID domains 0 and 1, "...=0/64+1=0/14" (cookie-safe). It holds
// positions and a time only, no secrets.
func (s *SessionState) Token() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	clusters := make([]uint64, 0, len(s.positions))
	for c := range s.positions {
		clusters = append(clusters, c)
	}
	sort.Slice(clusters, func(i, j int) bool { return clusters[i] < clusters[j] })
	var b strings.Builder
	b.WriteString("v1")
	if s.lastWrite > 0 {
		fmt.Fprintf(&b, ".w=%d", s.lastWrite)
	}
	for _, c := range clusters {
		fmt.Fprintf(&b, ".%d=%s", c, s.positions[c])
	}
	return b.String()
}

// ErrBadToken: a session token could not be parsed.
var ErrBadToken = errors.New("plugin: malformed session token")

// ParseToken parses a token made by Token. An empty string is an empty
// session.
func ParseToken(tok string) (*SessionState, error) {
	s := &SessionState{}
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
		s.raise(cluster, p)
	}
	return s, nil
}
