package plugin

import (
	"fmt"
	"net/http"
	"time"
)

// MiddlewareConfig configures Middleware.
type MiddlewareConfig struct {
	// CookieName is the cookie that carries the session token. Default:
	// "freshread_session".
	CookieName string
	// Header, when the request has it, carries the token instead of the
	// cookie (for API clients); the response repeats the new token in it.
	// Default: "X-Freshread-Session".
	Header string
	// MaxAge is the cookie's lifetime. Default: 1 hour. A token only ever
	// sends reads to the primary until the replicas pass it, so an old
	// token costs nothing.
	MaxAge time.Duration
	// Secure sets the cookie's Secure flag. Default: false.
	Secure bool
	// Keys, when set, authenticate tokens: the first key signs every token
	// the middleware sends (HMAC-SHA256 over the whole token, appended as
	// ".m=<MAC>"), and a token is accepted when any key verifies it;
	// a token without a valid MAC (forged, altered, unsigned, or signed by
	// a key no longer listed) is ignored: the request starts with an empty
	// session. To rotate, put the new key first and keep the old one
	// second until every token signed with it has expired (MaxAge): a
	// token that verifies with the old key is sent back signed with the
	// new one. Each key must have at least 16 bytes (32 random bytes
	// recommended): NewMiddleware returns an error otherwise, and
	// Middleware panics. Every process that
	// serves the same clients needs the same keys. Default: none (tokens
	// are not signed; their positions are still checked against the
	// primary's, docs/guide/configuration.md).
	Keys [][]byte
}

// minKeyLen is the shortest key MiddlewareConfig.Keys accepts.
const minKeyLen = 16

// Middleware returns net/http middleware that gives each request a session
// (read-your-writes across requests): the token from the header or cookie
// is parsed into the request's context, and when the handler writes, the
// new token is sent back before the response headers. A malformed token,
// or with MiddlewareConfig.Keys one without a valid MAC, is ignored (an
// empty session), never an error; the plugin counts it
// (freshread_session_tokens_ignored_total) and logs it at debug level
// when it routes the request's first read. Middleware panics when the
// config is invalid (a key shorter than 16 bytes); NewMiddleware returns
// the error instead.
func Middleware(cfg MiddlewareConfig) func(http.Handler) http.Handler {
	mw, err := NewMiddleware(cfg)
	if err != nil {
		panic(err)
	}
	return mw
}

// Validate reports an invalid MiddlewareConfig: a key shorter than 16
// bytes (an unset environment variable read as a key would make tokens
// forgeable), wrapping ErrConfig.
func (c MiddlewareConfig) Validate() error {
	for i, k := range c.Keys {
		if len(k) < minKeyLen {
			return fmt.Errorf("%w: MiddlewareConfig.Keys[%d] has %d bytes, want at least %d (32 random bytes recommended)", ErrConfig, i, len(k), minKeyLen)
		}
	}
	return nil
}

// NewMiddleware is Middleware returning an invalid config's error
// (Validate) instead of panicking.
func NewMiddleware(cfg MiddlewareConfig) (func(http.Handler) http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.CookieName == "" {
		cfg.CookieName = "freshread_session"
	}
	if cfg.Header == "" {
		cfg.Header = "X-Freshread-Session"
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = time.Hour
	}
	keys := make([][]byte, len(cfg.Keys))
	for i, k := range cfg.Keys {
		keys[i] = append([]byte(nil), k...)
	}
	cfg.Keys = keys
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tok := r.Header.Get(cfg.Header)
			if tok == "" {
				if c, err := r.Cookie(cfg.CookieName); err == nil {
					tok = c.Value
				}
			}
			s, tok := requestSession(tok, cfg.Keys)
			sw := &sessionWriter{ResponseWriter: w, s: s, old: tok, cfg: &cfg}
			next.ServeHTTP(sw, r.WithContext(ContextWithSession(r.Context(), s)))
			sw.flushToken()
		})
	}, nil
}

// sessionWriter sets the token on the response before its headers go out.
type sessionWriter struct {
	http.ResponseWriter
	s    *SessionState
	old  string
	cfg  *MiddlewareConfig
	done bool
}

func (w *sessionWriter) flushToken() {
	if w.done {
		return
	}
	w.done = true
	if w.s.Empty() {
		return
	}
	tok := w.s.Token()
	if len(w.cfg.Keys) > 0 {
		tok = signToken(tok, w.cfg.Keys[0])
	}
	if tok == w.old {
		return
	}
	w.Header().Set(w.cfg.Header, tok)
	http.SetCookie(w.ResponseWriter, &http.Cookie{
		Name: w.cfg.CookieName, Value: tok, Path: "/", HttpOnly: true,
		MaxAge: int(w.cfg.MaxAge / time.Second), Secure: w.cfg.Secure, SameSite: http.SameSiteLaxMode,
	})
}

func (w *sessionWriter) WriteHeader(code int) {
	w.flushToken()
	w.ResponseWriter.WriteHeader(code)
}

func (w *sessionWriter) Write(b []byte) (int, error) {
	w.flushToken()
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *sessionWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
