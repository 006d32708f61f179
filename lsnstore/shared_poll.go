package lsnstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Shared polling (docs/design/topology.md, "One poller for a fleet"). The
// processes that share a store elect one of them, with a lease in the
// store, to poll the primary and the replicas; it publishes what it found
// (a snapshot the plugin encodes) with a lifetime measured by the store's
// own clock, and the others read that instead of polling the servers.
// What a snapshot says of a replica is a lower bound of what the replica
// has replayed, so an old snapshot can only make fewer replicas eligible.

// SharedPoller is implemented by stores that several processes share
// (Redis).
type SharedPoller interface {
	// PublishPoll publishes snap as the snapshot of the poller member,
	// alive for ttl from when the store receives it, and holds or renews
	// the poller lease for member for lease, provided no other member
	// holds it. It reports whether member holds the lease (false: snap
	// was not published).
	PublishPoll(ctx context.Context, member string, lease time.Duration, snap []byte, ttl time.Duration) (bool, error)
	// SharedPoll returns the published snapshot and how long it has left
	// to live (nil and 0 when there is none).
	SharedPoll(ctx context.Context) ([]byte, time.Duration, error)
	// ResignPoller gives up member's poller lease and deletes its
	// snapshot, if member holds the lease.
	ResignPoller(ctx context.Context, member string) error
}

var _ SharedPoller = (*Redis)(nil)

// SnapshotGetter is a SharedPoller that can read the snapshot alone,
// without how long it has left: one GET instead of a script of two
// commands. Its caller must take the snapshot as published up to its
// whole lifetime ago.
type SnapshotGetter interface {
	// GetSharedPoll returns the published snapshot (nil when there is
	// none).
	GetSharedPoll(ctx context.Context) ([]byte, error)
}

var _ SnapshotGetter = (*Redis)(nil)

// GetSharedPoll implements SnapshotGetter with one GET.
func (r *Redis) GetSharedPoll(ctx context.Context) ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	b, err := r.rdb.Get(ctx, r.pollKey()).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lsnstore: redis shared poll: %w", err)
	}
	return b, nil
}

// pollerKey holds the poller lease's member; pollKey the snapshot. In the
// anchor's slot, with names no table's key can take (those end in
// "-write_lsn").
func (r *Redis) pollerKey() string { return r.base + "poller" }
func (r *Redis) pollKey() string   { return r.base + "poll" }

// publishPollScript: KEYS[1] the poller key, KEYS[2] the snapshot;
// ARGV[1] the member, ARGV[2] the lease in ms, ARGV[3] the snapshot,
// ARGV[4] its lifetime in ms. Returns 1 when published.
var publishPollScript = redis.NewScript(`
local h = redis.call('GET', KEYS[1])
if h and h ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
return 1
`)

// sharedPollScript: KEYS[1] the snapshot; returns it and its PTTL.
var sharedPollScript = redis.NewScript(`
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
`)

// resignPollerScript: KEYS[1] the poller key, KEYS[2] the snapshot;
// ARGV[1] the member.
var resignPollerScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
end
return 0
`)

// PublishPoll implements SharedPoller with one script call.
func (r *Redis) PublishPoll(ctx context.Context, member string, lease time.Duration, snap []byte, ttl time.Duration) (bool, error) {
	if r.err != nil {
		return false, r.err
	}
	if lease < time.Millisecond || ttl < time.Millisecond {
		return false, fmt.Errorf("lsnstore: publish poll: lease %v and lifetime %v must be at least 1ms", lease, ttl)
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	n, err := publishPollScript.Run(ctx, r.rdb, []string{r.pollerKey(), r.pollKey()},
		member, lease.Milliseconds(), snap, ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("lsnstore: redis publish poll: %w", err)
	}
	return n == 1, nil
}

// SharedPoll implements SharedPoller with one script call.
func (r *Redis) SharedPoll(ctx context.Context) ([]byte, time.Duration, error) {
	if r.err != nil {
		return nil, 0, r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	v, err := sharedPollScript.Run(ctx, r.rdb, []string{r.pollKey()}).Slice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, fmt.Errorf("lsnstore: redis shared poll: %w", err)
	}
	if len(v) != 2 {
		return nil, 0, nil // a missing snapshot ends the reply at its nil
	}
	s, _ := v[0].(string)
	ms, _ := v[1].(int64)
	if s == "" || ms <= 0 {
		return nil, 0, nil
	}
	return []byte(s), time.Duration(ms) * time.Millisecond, nil
}

// ResignPoller implements SharedPoller with one script call.
func (r *Redis) ResignPoller(ctx context.Context, member string) error {
	if r.err != nil {
		return r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	if err := resignPollerScript.Run(ctx, r.rdb, []string{r.pollerKey(), r.pollKey()}, member).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("lsnstore: redis resign poller: %w", err)
	}
	return nil
}
