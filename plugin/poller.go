package plugin

import (
	"context"
	"maps"
	"sort"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// primarySample is the primary's insert position at a time, kept for
// MaxLag so the poller can tell whether a replica is within MaxLag.
type primarySample struct {
	at  time.Time
	pos lsnstore.Position
}

// poll is the background poller: every PollInterval it reads the primary's
// positions and each replica's replay position, publishes them, retries
// pending writes and wakes MaxWait waiters.
func (p *Plugin) poll() {
	defer p.wg.Done()
	defer p.resignOnClose()
	t := time.NewTicker(p.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		if p.shouldRest(time.Now()) {
			if !p.rest() {
				return // closing
			}
			t.Reset(p.cfg.PollInterval)
		}
		ctx, cancel := context.WithTimeout(context.Background(), p.pollTimeout())
		p.pollOnce(ctx, false)
		cancel()
	}
}

func (p *Plugin) pollTimeout() time.Duration {
	d := 10 * p.cfg.PollInterval
	if d < time.Second {
		d = time.Second
	}
	return d
}

// replayRepublish is how often unchanged replay positions are published
// again.
const replayRepublish = 10 * time.Second

// WAL page geometry (PostgreSQL defaults): a record never starts inside a
// page header, so an insert position right after a header means the WAL
// ended at the page boundary before it.
const (
	walPageSize       = 8192
	walSegmentSize    = 16 << 20
	walShortHeader    = 24
	walLongHeader     = 40
	maxPrimarySamples = 1 << 16
)

// addPrimarySample records the primary's position at a time, in time
// order (a sample older than the last is dropped); the caller trims.
func (p *Plugin) addPrimarySample(ps primarySample) {
	if n := len(p.samples); n > 0 && ps.at.Before(p.samples[n-1].at) {
		return
	}
	p.samples = append(p.samples, ps)
}

// trimPrimarySamples keeps the samples MaxLag needs at now: the last one
// at or before now-MaxLag and every later one, at most maxPrimarySamples.
func (p *Plugin) trimPrimarySamples(now time.Time) {
	cut := now.Add(-p.cfg.MaxLag)
	i := 0
	for i+1 < len(p.samples) && !p.samples[i+1].at.After(cut) {
		i++
	}
	p.samples = p.samples[i:]
	if len(p.samples) > maxPrimarySamples {
		p.samples = p.samples[len(p.samples)-maxPrimarySamples:]
	}
}

// pollOnce polls once. waitAll: wait for every replica's answer (the
// first poll, before Initialize returns), else at most replicaAnswerWait.
func (p *Plugin) pollOnce(ctx context.Context, waitAll bool) {
	defer p.wakeWaiters()
	defer p.stats.polls.Add(1)
	// A follower takes the shared poll's snapshot (shared_poll.go); this
	// process polls the servers itself when there is none it can use.
	sp, shared := p.sharedPoller()
	if shared && !p.leading.Load() && p.followOnce(ctx, sp) {
		return
	}
	p.carrySnapshot(false) // its reads route on its own poll's states
	began := time.Now()
	// The store first (continuity.go): the primary's position read next
	// is after the verification.
	epoch, verified := p.verifyStore(ctx)
	// Before a floor: no lapsed writer's COMMIT may land after it
	// (writer_fence.go).
	if verified && epoch.Changed && !p.fenceWithOwnBudget(ctx) {
		verified = false
	}
	// Primary first: a replica that (polled afterwards) has replayed the
	// primary's flush position has everything committed before this point.
	ins, flush, err := p.engine.primaryPositions(ctx, p.primaryDB)
	primaryOK := err == nil
	p.notePrimaryPoll(ctx, err)
	now := time.Now()
	token := "" // the store's token this poll verified and accepted
	if primaryOK {
		p.addPrimarySample(primarySample{at: now, pos: ins})
		p.lastPrimary.Store(&ins)
		if verified {
			p.acceptStore(ctx, epoch, ins, now)
			token = epoch.Token
		}
	}
	p.expireLossFloor(now)
	p.checkEviction(ctx, now)
	// The threshold a replica must have replayed to be within MaxLag: the
	// primary's position MaxLag ago, or the oldest sample when the process
	// is younger than that (higher, so conservative).
	p.trimPrimarySamples(now)
	var threshold lsnstore.Position
	if len(p.samples) > 0 {
		threshold = p.samples[0].pos
	}

	// Positions the tracker published (Config.ReplayFromStore); a replica
	// missing there (tracker dead: the keys expired, or it could not reach
	// the replica) is polled directly.
	var fromStore map[string]lsnstore.Position
	if p.cfg.ReplayFromStore {
		fromStore, _ = p.cfg.Store.ReplayPositions(ctx)
	}
	published := p.pollReplicas(ctx, fromStore, primaryView{ins: ins, flush: flush, ok: primaryOK, threshold: threshold}, waitAll)
	if len(published) > 0 && !p.cfg.ReplayFromStore && (!maps.EqualFunc(published, p.lastPublished, lsnstore.Position.Equal) || now.Sub(p.lastPublishedAt) >= replayRepublish) {
		// Only changes (and a periodic refresh, which keeps the keys' TTL):
		// an idle cluster costs the store nothing per poll.
		if p.cfg.Store.PublishReplay(ctx, published) == nil {
			p.lastPublished, p.lastPublishedAt = published, now
		}
	}
	p.retryPending(ctx)
	p.checkReplication(ctx, now)
	if p.cfg.DirectWrites {
		p.checkDecoding(ctx, ins, primaryOK, now)
	}
	if now.Sub(p.depsCheckedAt) >= dependentsRefresh || p.staleDue(now) {
		p.depsCheckedAt = now
		p.refreshDependents(ctx, now, true)
	}
	if shared {
		p.lead(ctx, sp, began, token)
	}
}

// wakeWaiters wakes the reads waiting for a poll (MaxWait, a read after
// the poller rested).
func (p *Plugin) wakeWaiters() {
	next := make(chan struct{})
	old := p.tick.Swap(&next)
	close(*old)
}

// checkDecoding sets the direct-write floor from the tracker's decoded
// position (Config.DirectWrites). The tracker is trusted when its decoded
// position is within MaxDecodeLag bytes of the primary's and covers what
// the primary had MaxDecodeDelay ago (a dead tracker's position stays in
// the store until its key expires, minutes later: it stops being trusted
// MaxDecodeDelay after it stopped decoding). Only PostgreSQL has a
// decoding tracker: a position with named lanes (MariaDB, MySQL) always
// sets the floor to the primary's whole position.
func (p *Plugin) checkDecoding(ctx context.Context, ins lsnstore.Position, primaryOK bool, now time.Time) {
	if !primaryOK {
		ins = lsnstore.Position{}
		if last := p.lastPrimary.Load(); last != nil {
			ins = *last
		}
	}
	var decoded lsnstore.LSN
	var err error
	if ds, ok := p.cfg.Store.(lsnstore.DecodedStore); ok && !ins.HasLanes() {
		if uds, ok := ds.(lsnstore.UnkeyedDecodedStore); ok && p.cfg.keyed() {
			// Keyed reads look at unkeyed positions: only a tracker that
			// raises them may be trusted.
			decoded, err = uds.UnkeyedDecodedPosition(ctx)
		} else {
			decoded, err = ds.DecodedPosition(ctx)
		}
	}
	head := ins.Main()
	trusted := !ins.HasLanes() && err == nil && decoded != 0 &&
		(head <= decoded || uint64(head-decoded) <= p.cfg.MaxDecodeLag) &&
		decoded >= p.primaryAt(now.Add(-p.cfg.MaxDecodeDelay)).Main()
	if trusted {
		p.directPart = nil
	} else {
		p.directPart = &ins
	}
	p.storeFloor()
}

// primaryAt is the primary's position at t as the samples know it: the
// last sample taken at or before t, else the oldest (taken after t: higher,
// so conservative); zero without samples.
func (p *Plugin) primaryAt(t time.Time) lsnstore.Position {
	if len(p.samples) == 0 {
		return lsnstore.Position{}
	}
	i := sort.Search(len(p.samples), func(i int) bool { return p.samples[i].at.After(t) })
	if i == 0 {
		return p.samples[0].pos
	}
	return p.samples[i-1].pos
}

// idleCaughtUp reports whether flush and insert differ only by the page
// header the insert position skips: then a replica at flush has everything.
// Only PostgreSQL positions (main lane only) can differ so.
func idleCaughtUp(insPos, flushPos lsnstore.Position) bool {
	if insPos.Equal(flushPos) {
		return true
	}
	if insPos.HasLanes() || flushPos.HasLanes() {
		return false
	}
	ins, flush := insPos.Main(), flushPos.Main()
	hdr := uint64(walShortHeader)
	if uint64(ins)%walSegmentSize < walPageSize {
		hdr = walLongHeader // the first page of a segment has the long header
	}
	return uint64(ins)%walPageSize == hdr && uint64(flush) == uint64(ins)-hdr
}
