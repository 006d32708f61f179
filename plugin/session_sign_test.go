package plugin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/freshread/freshread/lsnstore"
)

var (
	oldKey = []byte("0123456789abcdef0123456789abcdef")
	newKey = []byte("fedcba9876543210fedcba9876543210")
)

// serveToken sends one request with tok in the session header through
// Middleware(cfg) and returns the session the handler saw and the token
// the response carries ("" when none). write: the handler records a write
// of cluster 7 at 0/500.
func serveToken(t *testing.T, cfg MiddlewareConfig, tok string, write bool) (*SessionState, string) {
	t.Helper()
	var seen *SessionState
	h := Middleware(cfg)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = SessionFrom(r.Context())
		if write {
			seen.raise(7, lsnstore.PositionOf(0x500))
		}
	}))
	req := httptest.NewRequest("GET", "/", nil)
	if tok != "" {
		req.Header.Set("X-Freshread-Session", tok)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return seen, rec.Header().Get("X-Freshread-Session")
}

// TestSignedTokenRejectsForgeries: with a key, the middleware signs the
// token it sends and accepts it back; a token without a MAC, with its
// position raised, with its MAC altered, signed by another key, or
// malformed in any way gives the handler an empty session that says why,
// and no panic.
func TestSignedTokenRejectsForgeries(t *testing.T) {
	cfg := MiddlewareConfig{Keys: [][]byte{newKey}}
	_, signed := serveToken(t, cfg, "", true)
	if !strings.HasPrefix(signed, "v1.7=0/500.m=") {
		t.Fatalf("signed token %q", signed)
	}
	s, back := serveToken(t, cfg, signed, false)
	if !s.position(7).Equal(lsnstore.PositionOf(0x500)) || s.ignored != "" {
		t.Fatalf("genuine token: position %v, ignored %q", s.position(7), s.ignored)
	}
	if back != "" {
		t.Fatalf("an unchanged session was sent back: %q", back)
	}
	body, mac, _ := strings.Cut(signed, macSep)
	flipped := []byte(mac)
	flipped[3] ^= 1
	for name, tok := range map[string]string{
		"unsigned":          body,
		"maximal unsigned":  "v1.7=FFFFFFFF/FFFFFFFF",
		"position raised":   strings.Replace(body, "0/500", "0/501", 1) + macSep + mac,
		"maximal with MAC":  "v1.7=FFFFFFFF/FFFFFFFF" + macSep + mac,
		"other database":    strings.Replace(body, "v1.7=", "v1.9=", 1) + macSep + mac,
		"MAC altered":       body + macSep + string(flipped),
		"MAC truncated":     signed[:len(signed)-2],
		"MAC not base64":    body + macSep + "!!!",
		"other key":         signToken(body, oldKey),
		"write time added":  "v1.w=1.7=0/500" + macSep + mac,
		"two MACs":          signed + macSep + mac,
		"empty MAC":         body + macSep,
		"only a MAC":        macSep + mac,
		"garbage":           "\x00\xff.m=.m=",
		"long":              strings.Repeat("v1.7=0/1", 1000),
		"malformed, signed": signToken("v2.x", newKey),
	} {
		s, _ := serveToken(t, cfg, tok, false)
		want := ignoredBadSignature
		if name == "malformed, signed" {
			want = ignoredMalformed
		}
		if !s.Empty() || s.ignored != want {
			t.Errorf("%s (%q): session %q, ignored %q; want empty, %q", name, tok, s.Token(), s.ignored, want)
		}
	}
}

// TestKeyRotation: with Keys {new, old}, a token signed with the old key
// verifies and is sent back signed with the new one; with Keys {new}
// alone, the old key's token is ignored; the new key's token verifies
// under both configurations.
func TestKeyRotation(t *testing.T) {
	_, oldTok := serveToken(t, MiddlewareConfig{Keys: [][]byte{oldKey}}, "", true)
	rotating := MiddlewareConfig{Keys: [][]byte{newKey, oldKey}}
	s, back := serveToken(t, rotating, oldTok, false)
	if !s.position(7).Equal(lsnstore.PositionOf(0x500)) {
		t.Fatalf("old key's token during the rotation: position %v, ignored %q", s.position(7), s.ignored)
	}
	if _, ok := verifyToken(back, [][]byte{newKey}); !ok {
		t.Fatalf("token sent back during the rotation %q is not signed with the new key", back)
	}
	s, _ = serveToken(t, MiddlewareConfig{Keys: [][]byte{newKey}}, oldTok, false)
	if !s.Empty() || s.ignored != ignoredBadSignature {
		t.Fatalf("old key's token after the rotation: %q, ignored %q", s.Token(), s.ignored)
	}
	for _, cfg := range []MiddlewareConfig{rotating, {Keys: [][]byte{newKey}}} {
		if s, _ := serveToken(t, cfg, back, false); !s.position(7).Equal(lsnstore.PositionOf(0x500)) {
			t.Fatalf("new key's token with %d keys: %q, ignored %q", len(cfg.Keys), s.Token(), s.ignored)
		}
	}
	// Without keys a signed token is read (its MAC dropped): removing
	// the keys does not lose sessions.
	if s, _ := serveToken(t, MiddlewareConfig{}, back, false); !s.position(7).Equal(lsnstore.PositionOf(0x500)) {
		t.Fatalf("signed token without keys: %q, ignored %q", s.Token(), s.ignored)
	}
}

// TestMiddlewareShortKey: a key shorter than 16 bytes (an unset
// environment variable, say) is a configuration error at once:
// NewMiddleware returns it, Middleware panics with it.
func TestMiddlewareShortKey(t *testing.T) {
	bad := MiddlewareConfig{Keys: [][]byte{newKey, nil}}
	if mw, err := NewMiddleware(bad); mw != nil || !IsConfig(err) || !strings.Contains(err.Error(), "Keys[1] has 0 bytes") {
		t.Fatalf("NewMiddleware: %v, want a configuration error naming Keys[1]", err)
	}
	if _, err := NewMiddleware(MiddlewareConfig{Keys: [][]byte{newKey}}); err != nil {
		t.Fatalf("NewMiddleware with a good key: %v", err)
	}
	defer func() {
		err, _ := recover().(error)
		if !IsConfig(err) || !strings.Contains(err.Error(), "Keys[1] has 0 bytes") {
			t.Fatalf("recovered %v, want a configuration error naming Keys[1]", err)
		}
	}()
	Middleware(MiddlewareConfig{Keys: [][]byte{newKey, nil}})
}

// TestFutureWriteTime: a write time more than maxWriteTimeSkew ahead is
// ignored (it would keep StickyWindow open forever); the token's
// positions are kept.
func TestFutureWriteTime(t *testing.T) {
	s, err := ParseToken("v1.w=99999999999999.7=0/500")
	if err != nil {
		t.Fatal(err)
	}
	if s.lastWrite != 0 || s.ignored != ignoredFutureWrite || !s.position(7).Equal(lsnstore.PositionOf(0x500)) {
		t.Fatalf("lastWrite %d, ignored %q, position %v", s.lastWrite, s.ignored, s.position(7))
	}
}
