package plugin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"time"
)

// A resting poller (Config.IdleAfter). A process that has served no read
// and no write for IdleAfter stops polling: it gives up the poller's lease
// (shared_poll.go) and its writer lease (lease.go), and waits for the next
// read or write (demand). What it knew stays and only ages: replay
// positions are lower bounds, a replica's state is usable for MaxLag after
// its poll as when polls fail, and a store that lost data while it rested
// is caught by the anchor every read checks. The first read after a rest
// waits for one poll, at most replicaAnswerWait. A poller never rests with
// work outstanding: writes whose positions are not published, a write
// waiting for its lease to end, transactions of other programs held, a
// write fenced less than a lease ago (its COMMIT may still be on its way,
// covered by the lease the rest would give up), or the tracker's decoding
// to watch (DirectWrites).

// demand notes a read or a write, and wakes a resting poller; a read
// (wait) then waits for its first poll, at most replicaAnswerWait.
func (p *Plugin) demand(wait bool) {
	// Stored at most every demandGrain: a read on every core would
	// otherwise write one shared cache line each.
	if now := time.Now().UnixNano(); now-p.lastDemand.Load() >= int64(demandGrain) {
		p.lastDemand.Store(now)
	}
	if !p.resting.Load() {
		return
	}
	tick := *p.tick.Load()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	if !wait {
		return
	}
	t := time.NewTimer(p.replicaAnswerWait())
	defer t.Stop()
	select {
	case <-tick:
	case <-t.C:
	case <-p.stop:
	}
}

// demandGrain is how stale lastDemand may be: far below any IdleAfter
// worth setting.
const demandGrain = 10 * time.Millisecond

// shouldRest reports whether the poller may rest now.
func (p *Plugin) shouldRest(now time.Time) bool {
	if p.cfg.IdleAfter < 0 || p.cfg.DirectWrites {
		return false
	}
	n := now.UnixNano()
	if n-p.lastDemand.Load() < int64(p.cfg.IdleAfter) {
		return false
	}
	if _, ok := p.leaser(); ok && n-p.lastFence.Load() < int64(p.cfg.WriterLease) {
		return false
	}
	return p.awaiting.Load() == 0 && !p.pending.suspect.Load() && len(p.pending.heldWrites()) == 0
}

// rest gives the leases up and waits for demand; it reports false when
// the plugin closes meanwhile.
func (p *Plugin) rest() bool {
	p.resting.Store(true)
	// A read or write that came between shouldRest and the line above
	// saw resting false and sent no wake: look again.
	if time.Now().UnixNano()-p.lastDemand.Load() < int64(p.cfg.IdleAfter) {
		p.resting.Store(false)
		return true
	}
	// No write may pass its fence while the lease goes: one that passed
	// less than a lease ago keeps the poller awake.
	p.restMu.Lock()
	if _, ok := p.leaser(); ok && time.Now().UnixNano()-p.lastFence.Load() < int64(p.cfg.WriterLease) {
		p.restMu.Unlock()
		p.resting.Store(false)
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.PublishTimeout)
	p.resign(ctx)
	cancel()
	p.releaseLease()
	p.restMu.Unlock()
	p.stats.rests.Add(1)
	defer p.resting.Store(false)
	select {
	case <-p.stop:
		return false
	case <-p.wake:
		return true
	}
}

// resignOnClose gives the poller's lease up when the poller stops.
func (p *Plugin) resignOnClose() {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.PublishTimeout)
	defer cancel()
	p.resign(ctx)
}

// pollerMember names this process in the poller's lease: the process ID
// and a random part (never anything secret).
func pollerMember() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}
