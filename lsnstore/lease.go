package lsnstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Writer leases (docs/design/reliability.md, "A writer cut off from the
// store"). A process that committed a write it cannot publish, nor tell
// the others of (Invalidate), because the store is unreachable from it but
// not from them, would leave them reading the write stale. So every
// reader (every plugin) holds a lease in the store, renewed by its
// Verify, and the anchor, which every read checks in its own MGET, expires
// with the earliest lease: a process that stops renewing (cut off,
// paused, dead) makes the anchor vanish at its lease's end, every read
// refuses until its reader's next Verify, which rewrites the anchor, and
// that reader then takes the primary's position, read after the lapse,
// as its loss floor. A write that committed before its writer's lease
// ended is therefore never read stale once the lease has ended: the
// writer acknowledges such a write only when it was published, or the
// other processes were told (Invalidate), or its lease has surely ended
// (LeaseUntil). And a writer whose lease has ended, or is about to,
// refuses to commit.

// Leaser is implemented by readers whose store other processes share
// (RedisReader).
type Leaser interface {
	// SetLease sets the lease's length (0 holds none, the default).
	// Verify renews a lease that has half of it left or less.
	SetLease(ttl time.Duration)
	// LeaseUntil is a time before which the store surely holds the lease
	// (on this process's monotonic clock): a write that committed before
	// it is covered by the lease. The zero time when no renewal is known
	// to have succeeded.
	LeaseUntil() time.Time
	// LeaseGone is a time after which the store surely no longer keeps
	// the anchor alive for this lease, counting renewals whose outcome
	// is unknown: once it has passed, every other reader has refused, or
	// will refuse, the anchor it accepted before.
	LeaseGone() time.Time
	// RenewLease renews the lease now (one round trip: Verify's script,
	// whose Epoch it discards). Concurrent calls share one round trip.
	RenewLease(ctx context.Context) error
	// ReleaseLease gives the lease up (a process closing), so that its
	// end is not taken for a process cut off: one round trip.
	ReleaseLease(ctx context.Context) error
	// HoldRenewal stops (on) or resumes (off) renewing the lease; calls
	// nest. A process waiting for its lease to end, to cover a write it
	// could not publish, holds it.
	HoldRenewal(on bool)
}

var _ Leaser = (*RedisReader)(nil)

// leaseState is a RedisReader's lease, on the monotonic clock.
type leaseState struct {
	ttl  atomic.Int64 // nanoseconds; 0: no lease
	held atomic.Int32 // HoldRenewal's count

	mu sync.Mutex
	// member is this reader's member in the leases set. A member is
	// created by exactly one call (created: that call was sent), so a
	// member the store removed never comes back (leaseCall); creating: a
	// call that creates one is in flight.
	member            string
	memberTag         uint32 // leaseTagOf(member)
	created, creating bool
	// until: the store holds the lease until at least then.
	until time.Time
	// gone: the store holds the lease no later than then.
	gone time.Time
	// refServer is the server's time (ms) of the last answered call,
	// sent at refSent and answered at refRecv.
	refServer        int64
	refSent, refRecv time.Time
	// renewing serialises RenewLease calls made by writes, so that a
	// store that does not answer is asked once at a time.
	renewing sync.Mutex
}

// leaseMember names a reader in the leases set: the process ID and a
// random part (never anything secret).
func leaseMember() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

// leasesKey is the sorted set of the leases (member -> end, in the
// server's milliseconds), in the anchor's slot.
func (r *Redis) leasesKey() string { return r.base + "leases" }

// lapsedKey is the sorted set of the members removed for having lapsed
// (member -> when, in the server's milliseconds), kept lapsedRetention, in
// the anchor's slot.
func (r *Redis) lapsedKey() string { return r.base + "leases-lapsed" }

// lapsedRetention is how long a lapsed member stays in the lapsed set: the
// plugins end the connections tagged with it at their next verification
// (every poll), so an hour is far longer than needed; the set holds one
// short string per lapse.
const lapsedRetention = time.Hour

// SetLease implements Leaser.
func (rr *RedisReader) SetLease(ttl time.Duration) { rr.lease.ttl.Store(int64(max(ttl, 0))) }

// LeaseUntil implements Leaser.
func (rr *RedisReader) LeaseUntil() time.Time {
	rr.lease.mu.Lock()
	defer rr.lease.mu.Unlock()
	return rr.lease.until
}

// LeaseGone implements Leaser.
func (rr *RedisReader) LeaseGone() time.Time {
	rr.lease.mu.Lock()
	defer rr.lease.mu.Unlock()
	return rr.lease.gone
}

// RenewLease implements Leaser.
func (rr *RedisReader) RenewLease(ctx context.Context) error {
	if !rr.lease.renewing.TryLock() {
		// Another write is renewing: wait for its answer.
		rr.lease.renewing.Lock()
		rr.lease.renewing.Unlock()
		return nil
	}
	defer rr.lease.renewing.Unlock()
	_, err := rr.verify(ctx, true)
	return err
}

// ReleaseLease implements Leaser.
func (rr *RedisReader) ReleaseLease(ctx context.Context) error {
	r := rr.Redis
	if r.err != nil || rr.lease.ttl.Load() == 0 {
		return r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	if err := releaseLeaseScript.Run(ctx, r.rdb, []string{r.anchorKey, r.leasesKey()}, rr.currentMember()).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("lsnstore: redis release lease: %w", err)
	}
	rr.lease.mu.Lock()
	rr.lease.until = time.Time{}
	rr.lease.mu.Unlock()
	return nil
}

// currentMember is the reader's member in the leases set.
func (rr *RedisReader) currentMember() string {
	rr.lease.mu.Lock()
	defer rr.lease.mu.Unlock()
	return rr.lease.member
}

// releaseLeaseScript removes the lease ARGV[1] from the leases set
// (KEYS[2]) and lets the anchor (KEYS[1]) expire with the earliest lease
// left, or never when none is left: a process that holds no lease can
// commit nothing the anchor must answer for (docs/design/reliability.md).
// When a lease has lapsed, the anchor expired with it already: it is left
// alone, for the next Verify to replace.
var releaseLeaseScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREM', KEYS[2], ARGV[1])
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if first[2] then
  if tonumber(first[2]) >= now then
    redis.call('PEXPIREAT', KEYS[1], first[2])
  end
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PERSIST', KEYS[1])
end
return 0
`)

// HoldRenewal implements Leaser.
func (rr *RedisReader) HoldRenewal(on bool) {
	if on {
		rr.lease.held.Add(1)
	} else {
		rr.lease.held.Add(-1)
	}
}

// leaseCall is one anchor script call's lease arguments.
type leaseCall struct {
	member string // anchorScript's ARGV[2]
	ms, by string // anchorScript's ARGV[3] and ARGV[4]
	create bool   // the call creates member
	ttl    time.Duration
	sent   time.Time
	// late bounds, on this clock, when the call may still extend the
	// lease (zero: it may only create one).
	late time.Time
}

// leaseSlack covers the difference between this process's clock rate and
// the server's over a lease.
func leaseSlack(ttl time.Duration) time.Duration { return ttl/100 + 5*time.Millisecond }

// leaseCall returns the lease arguments of a call about to be sent: a
// renewal when renew or when half of the lease is left or less, which
// may extend the lease only until maxDelay after it was sent (by the
// server's clock, estimated from the last answer).
//
// A renewal sent once the lease may have ended (its until passed, or none
// was ever known) creates a member of a new name, never the old one
// again: the store may have removed the old one, and the other processes
// then ended every primary connection tagged with it (LeaseTagger); were
// it to come back, a process verifying afterwards would take those
// connections for a live writer's. One creation is in flight at a time.
func (rr *RedisReader) leaseCall(renew bool, maxDelay time.Duration) leaseCall {
	c := leaseCall{ms: "0", by: "0", sent: time.Now()}
	c.ttl = time.Duration(rr.lease.ttl.Load())
	ls := &rr.lease
	ls.mu.Lock()
	defer ls.mu.Unlock()
	c.member = ls.member
	if c.ttl == 0 || rr.lease.held.Load() > 0 {
		return c
	}
	if !renew && !ls.dueLocked(c.sent, c.ttl) {
		return c
	}
	if ls.until.IsZero() || !c.sent.Before(ls.until) {
		if ls.creating {
			return c // the creation under way answers for this one
		}
		if ls.created {
			ls.member, ls.until = leaseMember(), time.Time{}
			ls.memberTag = leaseTagOf(ls.member)
		}
		ls.created, ls.creating = true, true
		c.member, c.create = ls.member, true
		c.ms = strconv.FormatInt(c.ttl.Milliseconds(), 10)
		return c
	}
	c.ms = strconv.FormatInt(c.ttl.Milliseconds(), 10)
	if !ls.refSent.IsZero() {
		by := ls.refServer + c.sent.Sub(ls.refSent).Milliseconds() + maxDelay.Milliseconds()
		c.by = strconv.FormatInt(by, 10)
		c.late = c.sent.Add(ls.refRecv.Sub(ls.refSent) + maxDelay)
	}
	return c
}

// leaseFailed records a call whose outcome is unknown: a renewal in it
// may have reached the store and may extend the lease.
func (rr *RedisReader) leaseFailed(c leaseCall) {
	ls := &rr.lease
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if c.create {
		// It may have created its member, which no write of this
		// process relies on: the member is never tried again.
		ls.creating = false
		return
	}
	if c.ms == "0" || c.late.IsZero() {
		return // nothing renewed
	}
	if g := c.late.Add(c.ttl + leaseSlack(c.ttl)); g.After(ls.gone) {
		ls.gone = g
	}
}

// leaseAnswered records an answered call: the server's time, and the
// lease it renewed (anchorReply's code).
func (rr *RedisReader) leaseAnswered(c leaseCall, serverMs int64, renewed int64) {
	recv := time.Now()
	ls := &rr.lease
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.refServer, ls.refSent, ls.refRecv = serverMs, c.sent, recv
	if c.create {
		ls.creating = false
	}
	if renewed == -1 && c.member == ls.member {
		// The member is gone (lapsed, or lost with the store's data):
		// no lease is held; the next call creates another member.
		ls.until = time.Time{}
		return
	}
	if renewed != 1 {
		// Not due, or refused as late: the lease is what it was.
		return
	}
	if g := recv.Add(c.ttl + leaseSlack(c.ttl)); g.After(ls.gone) {
		ls.gone = g
	}
	if c.member == ls.member {
		ls.until = c.sent.Add(c.ttl - leaseSlack(c.ttl))
	}
}

// dueLocked reports whether a lease of length ttl is due for renewal at
// now: half of it left or less. A renewal is a script of about a dozen
// commands, and every process of a fleet makes them: at half the lease,
// a process renews every WriterLease/2 and still has three tenths of the
// lease (from half to the writes' fence at a fifth) to retry a renewal
// that failed before its writes are refused. ls.mu is held.
func (ls *leaseState) dueLocked(now time.Time, ttl time.Duration) bool {
	return ls.until.Sub(now) <= ttl/2
}

// LeaseTagger is implemented by readers whose lease names, besides itself,
// the connections to the primary through which its process commits writes
// (docs/design/reliability.md, "A COMMIT that outlives its lease"). A
// process tags such a connection with LeaseTag (a shared advisory lock on
// PostgreSQL) while it commits; before another process takes the
// primary's position as its floor after a discontinuity, it ends every
// connection whose tag LapsedLeaseTags lists, so that no write through it
// can commit after that position.
type LeaseTagger interface {
	// LeaseTag is the namespace of the store's leases (the same for
	// every process of the store) and the tag of this reader's current
	// member, which changes when a new member is created.
	LeaseTag() (ns, tag uint32)
	// LapsedLeaseTags returns the tags of the members the store removed
	// for having lapsed in the last hour (not those lost with its data):
	// one round trip.
	LapsedLeaseTags(ctx context.Context) ([]uint32, error)
}

var _ LeaseTagger = (*RedisReader)(nil)

// leaseTagOf hashes a namespace or a member into a tag (FNV-1a, 32 bits).
func leaseTagOf(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

// LeaseTag implements LeaseTagger.
func (rr *RedisReader) LeaseTag() (ns, tag uint32) {
	rr.lease.mu.Lock()
	defer rr.lease.mu.Unlock()
	return rr.nsTag, rr.lease.memberTag
}

// LapsedLeaseTags implements LeaseTagger.
func (rr *RedisReader) LapsedLeaseTags(ctx context.Context) ([]uint32, error) {
	r := rr.Redis
	if r.err != nil {
		return nil, r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	members, err := r.rdb.ZRange(ctx, r.lapsedKey(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("lsnstore: redis read the lapsed leases: %w", err)
	}
	tags := make([]uint32, len(members))
	for i, m := range members {
		tags[i] = leaseTagOf(m)
	}
	return tags, nil
}
