package plugin

import (
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
}

// Middleware returns net/http middleware that gives each request a session
// (read-your-writes across requests): the token from the header or cookie
// is parsed into the request's context, and when the handler writes, the
// new token is sent back before the response headers. A malformed token
// is ignored (an empty session), never an error.
func Middleware(cfg MiddlewareConfig) func(http.Handler) http.Handler {
	if cfg.CookieName == "" {
		cfg.CookieName = "freshread_session"
	}
	if cfg.Header == "" {
		cfg.Header = "X-Freshread-Session"
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = time.Hour
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tok := r.Header.Get(cfg.Header)
			if tok == "" {
				if c, err := r.Cookie(cfg.CookieName); err == nil {
					tok = c.Value
				}
			}
			s, err := ParseToken(tok)
			if err != nil {
				s, tok = &SessionState{}, ""
			}
			sw := &sessionWriter{ResponseWriter: w, s: s, old: tok, cfg: &cfg}
			next.ServeHTTP(sw, r.WithContext(ContextWithSession(r.Context(), s)))
			sw.flushToken()
		})
	}
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
