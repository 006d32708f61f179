package lsnstore

import "github.com/redis/go-redis/v9"

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

var (
	_ Checked        = (*Redis)(nil)
	_ ClientTimeouts = (*Redis)(nil)
)

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
