package plugin

import (
	"context"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// Store discontinuities (lsnstore.Verifier): a position store that lost
// data (Redis restarted empty, flushed, failed over, evicting) would make
// missing positions look like "nothing written". Every poll verifies the
// store first; after a change the poller reads the primary's position and
// makes it the loss floor, which every Table read waits for (the same
// floor as direct writes: floor.go), and only then accepts the store
// again. Meanwhile the store refuses reads (lsnstore.ErrDiscontinuity),
// which go to the primary. The floor is dropped after MaxLag: by then the
// MaxLag threshold of usable replicas is past it.

// evictionCheckInterval is how often the store's eviction policy is read.
const evictionCheckInterval = time.Minute

// verifyStore runs before the poll reads the primary: the position it
// then reads is after the verification.
func (p *Plugin) verifyStore(ctx context.Context) (lsnstore.Epoch, bool) {
	v, ok := p.cfg.Store.(lsnstore.Verifier)
	if !ok {
		return lsnstore.Epoch{}, false
	}
	e, err := v.Verify(ctx)
	if err != nil {
		// Reads keep refusing; the next poll tries again. Said once per
		// failing spell: a store that never verifies (a user not allowed
		// INFO or EVAL, a read-only replica) sends every read to the
		// primary.
		if !p.verifyFailing {
			p.verifyFailing = true
			p.cfg.Logger.WarnContext(ctx, "freshread: cannot verify the position store; table reads go to the primary until it can: err says why (Redis down or unreachable: start it or fix the network to it; NOPERM: grant the Redis user the commands of the operations guide, Redis permissions)", "err", err)
		}
		return lsnstore.Epoch{}, false
	}
	p.verifyFailing = false
	// The store answers: reads may consult it again at once, instead of
	// waiting for the circuit breaker's next probe (up to 5 s after a
	// long outage).
	p.breaker.Success()
	return e, true
}

// acceptStore accepts a verified epoch once the primary's position read
// after it (ins) is the loss floor when the store changed.
func (p *Plugin) acceptStore(ctx context.Context, e lsnstore.Epoch, ins lsnstore.Position, now time.Time) {
	if e.Changed {
		if p.lossPart != nil || p.verifiedOnce {
			p.cfg.Logger.WarnContext(ctx, "freshread: the position store may have lost positions (restarted empty, flushed, failed over or evicting), or a process could not publish a write (lsnstore.Invalidator); table reads wait for replicas that have replayed the primary's current position", "position", ins.String())
			p.stats.discontinuities.Add(1)
		}
		floor := ins
		if p.lossPart != nil {
			floor = floor.Merge(*p.lossPart)
		}
		p.lossPart, p.lossAt = &floor, now
		p.storeFloor()
		// A failover may have brought a server configured otherwise.
		p.evictionCheckedAt = time.Time{}
		// The key signatures went with the data; another process may
		// have recorded its own since.
		p.forgetSignatures()
	}
	p.verifiedOnce = true
	p.cfg.Store.(lsnstore.Verifier).Accept(e)
}

// expireLossFloor drops the loss floor once the MaxLag threshold covers
// it.
func (p *Plugin) expireLossFloor(now time.Time) {
	if p.lossPart != nil && now.Sub(p.lossAt) > p.cfg.MaxLag {
		p.lossPart = nil
		p.storeFloor()
	}
}

// checkEviction reads the store's eviction policy (at the first poll,
// every evictionCheckInterval and at the poll after a discontinuity, which
// may be a failover to a server configured otherwise), sets the metric,
// warns once when the server may evict position keys, and makes reads
// check for evictions in their own round trip unless the server is known
// not to evict (lsnstore.EvictionGuard).
func (p *Plugin) checkEviction(ctx context.Context, now time.Time) {
	ec, ok := p.cfg.Store.(lsnstore.EvictionChecker)
	if !ok || now.Sub(p.evictionCheckedAt) < evictionCheckInterval {
		return
	}
	p.evictionCheckedAt = now
	guard, _ := p.cfg.Store.(lsnstore.EvictionGuard)
	policy, mayEvict, err := ec.EvictionPolicy(ctx)
	switch {
	case err != nil:
		// Refused (a managed service) or unreachable: reads keep
		// guarding; asked again sooner than usual.
		p.evictionRisk.Store(evictionUnknown)
		p.evictionCheckedAt = now.Add(evictionRetry - evictionCheckInterval)
		if guard != nil {
			guard.GuardEvictions(true)
		}
	case !mayEvict:
		p.evictionRisk.Store(evictionNo)
		if guard != nil {
			guard.GuardEvictions(false)
		}
	default:
		p.evictionRisk.Store(evictionYes)
		if guard != nil {
			guard.GuardEvictions(true)
		}
		p.evictionWarning.Do(func() {
			p.cfg.Logger.WarnContext(ctx, "freshread: the position store's Redis may evict keys (maxmemory with an evicting policy); every read now also checks the server's eviction count, which costs the server more: use maxmemory-policy noeviction or a dedicated Redis", "maxmemory-policy", policy)
		})
	}
}

// evictionRetry is how soon a failed eviction-policy check is retried.
const evictionRetry = 5 * time.Second

// Values of Plugin.evictionRisk.
const (
	evictionUnknown int32 = iota
	evictionNo
	evictionYes
)
