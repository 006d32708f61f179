package lsnstore

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Defaults of RedisOptions.
const (
	DefaultPrefix  = "freshread:"
	DefaultTTL     = 10 * time.Minute
	DefaultTimeout = 50 * time.Millisecond
)

// ErrNoDatabase is the error of a Redis store built with an empty
// RedisOptions.Database (Validate, every call of the store, and db.Use of
// a plugin given the store): check it with errors.Is.
var ErrNoDatabase = errors.New("lsnstore: RedisOptions.Database is empty: set it to the logical name of the database, the same in every process (and the tracker) sharing it")

// RedisOptions configures a Redis store. The zero value of every field but
// Database selects its default.
type RedisOptions struct {
	// Database is the logical name of the database, used in every key
	// inside a hash tag ({Database}). Required: a store built with an empty
	// Database returns ErrNoDatabase from every call, and the plugin
	// refuses it at db.Use. It must not contain "}", which would end the
	// hash tag early.
	Database string

	// Prefix is prepended to every key. It must not contain "{" or "}",
	// which would change the hash tag.
	//
	// default: "freshread:" (when empty and NoPrefix is false)
	Prefix string

	// NoPrefix makes keys start at the hash tag, without a prefix, as in
	// the original design ("{orders}-users-write_lsn"). Prefix must then be
	// empty.
	//
	// default: false
	NoPrefix bool

	// TTL is the time to live of every key, refreshed by every call that
	// raises or publishes it. It must be longer than the largest replica lag
	// the application tolerates; see the package documentation. Must be at
	// least one millisecond when set.
	//
	// default: 10 minutes
	TTL time.Duration

	// KeyTTL is the time to live of key positions (keys.go, positions per
	// key value), which are many: one per row written within it, about
	// 200 bytes each. Like TTL it must be longer than the largest replica
	// lag the application tolerates (the plugin's MaxLag, 1 minute by
	// default): a key position may expire once every usable replica has
	// replayed it. It may be shorter than TTL and bounds the store's
	// memory to about KeyTTL × keys written per second × 200 bytes. Must
	// be at least one millisecond when set.
	//
	// default: TTL
	KeyTTL time.Duration

	// Timeout is the least time a read's lookup (WritePosition,
	// WritePositions) is given: the timeout is added to the call's context
	// unless that context ends sooner. A negative Timeout adds none, to any
	// call.
	//
	// go-redis applies context deadlines to dialing and to waiting for a
	// pooled connection, but to socket reads and writes only with
	// redis.Options.ContextTimeoutEnabled set (otherwise ReadTimeout, 5s by
	// default, bounds a server that stops answering). Set it.
	//
	// A lookup's timeout follows the store's measured round trips (twice
	// a smoothed round trip plus four deviations, after TCP's
	// retransmission timeout), from Timeout up to MaxTimeout: a store that
	// answers slowly because the machine is loaded is given the time it
	// takes, while one that stops answering is given up on after about
	// what it took before.
	//
	// default: 50 milliseconds
	Timeout time.Duration

	// MaxTimeout is the most a read's timeout grows to, and the timeout of
	// every call that is not a read's lookup: Raise, Invalidate, Verify,
	// ClaimSignature and the tracker's. None holds a read, but Raise and
	// Invalidate hold writes (the plugin's commit returns after them:
	// plugin.Config.PublishTimeout bounds how long), and each that
	// fails makes reads conservative (a write that cannot be published
	// sends every reader to the primary until the next poll), so a slow
	// store is given this long. At least Timeout. Ignored when Timeout is
	// negative.
	//
	// default: 10 × Timeout (500 milliseconds by default)
	MaxTimeout time.Duration
}

// Validate reports whether o can be used. NewRedis calls it and returns its
// error from every call of the store.
func (o RedisOptions) Validate() error {
	var errs []error
	if o.Database == "" {
		errs = append(errs, ErrNoDatabase)
	}
	if strings.Contains(o.Database, "}") {
		errs = append(errs, fmt.Errorf("lsnstore: RedisOptions.Database %q contains \"}\", which breaks its hash tag", o.Database))
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		errs = append(errs, fmt.Errorf("lsnstore: RedisOptions.Prefix %q contains a brace, which breaks the hash tag", o.Prefix))
	}
	if o.NoPrefix && o.Prefix != "" {
		errs = append(errs, fmt.Errorf("lsnstore: RedisOptions.Prefix is %q with NoPrefix set", o.Prefix))
	}
	if o.TTL < 0 || (o.TTL > 0 && o.TTL < time.Millisecond) {
		errs = append(errs, fmt.Errorf("lsnstore: RedisOptions.TTL is %v; it must be at least 1ms", o.TTL))
	}
	if o.KeyTTL < 0 || (o.KeyTTL > 0 && o.KeyTTL < time.Millisecond) {
		errs = append(errs, fmt.Errorf("lsnstore: RedisOptions.KeyTTL is %v; it must be at least 1ms", o.KeyTTL))
	}
	if timeout := cmp.Or(o.Timeout, DefaultTimeout); o.MaxTimeout < 0 || (o.MaxTimeout > 0 && timeout > 0 && o.MaxTimeout < timeout) {
		errs = append(errs, fmt.Errorf("lsnstore: RedisOptions.MaxTimeout is %v; it must be at least Timeout (%v)", o.MaxTimeout, timeout))
	}
	return errors.Join(errs...)
}

// withDefaults returns o with its zero fields set to their defaults.
func (o RedisOptions) withDefaults() RedisOptions {
	if o.Prefix == "" && !o.NoPrefix {
		o.Prefix = DefaultPrefix
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.KeyTTL == 0 {
		o.KeyTTL = o.TTL
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxTimeout == 0 {
		o.MaxTimeout = 10 * o.Timeout
	}
	return o
}
