package lsnstore

import (
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// Checked is implemented by stores whose construction can fail (Redis):
// Err returns the error every call of the store would return (invalid
// RedisOptions, a nil client, a client-side cache), nil when the store is
// usable. The plugin refuses such a store at db.Use instead of sending
// every read to the primary.
type Checked interface {
	Err() error
}

// ClientTimeouts is implemented by stores over a client that may ignore
// the store's deadlines (Redis): ContextTimeouts reports whether the
// client applies context deadlines to socket reads and writes
// (redis.Options.ContextTimeoutEnabled); known is false when the client's
// options cannot be read (a client type other than *redis.Client and
// *redis.ClusterClient).
type ClientTimeouts interface {
	ContextTimeouts() (enabled, known bool)
}

// Logging is implemented by stores that log what they meet (Redis: the
// commands the server refuses to the client's user, WatchRedis).
// SetLogger sends those logs to l instead of slog.Default() (nil: back to
// slog.Default()). The plugin gives its Config.Logger.
type Logging interface {
	SetLogger(l *slog.Logger)
}

var (
	_ Checked        = (*Redis)(nil)
	_ ClientTimeouts = (*Redis)(nil)
	_ Logging        = (*Redis)(nil)
)

// SetLogger implements Logging. The logger is the client's: every store,
// lookup cache or ID generator over the same client logs its refusals
// there, and the last SetLogger (or LogRedisTo) on the client wins.
func (r *Redis) SetLogger(l *slog.Logger) {
	if r.hook != nil {
		r.hook.logger.Store(l)
	}
}

// Err implements Checked: the error NewRedis found, which every call
// returns; nil when the store is usable.
func (r *Redis) Err() error { return r.err }

// ContextTimeouts implements ClientTimeouts. Without ContextTimeoutEnabled
// go-redis bounds a server that stops answering by its ReadTimeout (5 s by
// default), not by the store's Timeout. A Sentinel client
// (redis.NewFailoverClient) is a *redis.Client.
func (r *Redis) ContextTimeouts() (enabled, known bool) {
	switch c := r.rdb.(type) {
	case *redis.Client:
		if c != nil {
			return c.Options().ContextTimeoutEnabled, true
		}
	case *redis.ClusterClient:
		if c != nil {
			return c.Options().ContextTimeoutEnabled, true
		}
	}
	return false, false
}
