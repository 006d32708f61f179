package plugin

import (
	"context"
	"encoding/json"
	"time"
	"weak"

	"github.com/freshread/freshread/lsnstore"
)

// One poller for a fleet (docs/design/topology.md, "One poller for a
// fleet"). With a store that processes share (lsnstore.SharedPoller), one
// process at a time holds the poller's lease: it polls the primary and
// the replicas as a lone process does and publishes what it found, a
// snapshot that lives PollerLease by the store's clock. Every other
// process (a follower) reads the snapshot at its poll instead of asking
// the servers, and polls them itself only when there is none (the holder
// stopped: closed, resting, cut off, dead), which is also when it tries
// to take the lease. A snapshot's replay positions are lower bounds of
// what each replica had replayed when it was taken, and a follower counts
// its age from when the poll that made it began: an old snapshot can only
// make fewer replicas eligible, never more. A follower applies an entry
// only to the replica whose server identity (endpoint.go) is the one it
// verified itself, so a replica named alike elsewhere is never taken for
// its own.

// pollSnapshot is what the poller's holder publishes.
type pollSnapshot struct {
	// V is the format's version (pollSnapshotVersion).
	V int `json:"v"`
	// Primary is the primary's insert position the poll read ("" when it
	// could not).
	Primary string `json:"p,omitempty"`
	// Age is how old, in microseconds, the poll was when published.
	Age int64 `json:"age"`
	// TTL is the snapshot's lifetime in the store, in milliseconds.
	TTL int64 `json:"ttl"`
	// Replicas are the replicas the poll knows, by server identity.
	Replicas []snapshotReplica `json:"r"`
	// Token is the store's token the poll verified and accepted ("" when
	// it did not), which followers adopt instead of verifying the store
	// themselves (lsnstore.Adopter).
	Token string `json:"tok,omitempty"`
}

// snapshotReplica is one replica in a pollSnapshot.
type snapshotReplica struct {
	ID        string `json:"id"`
	Pos       string `json:"pos,omitempty"`
	Up        bool   `json:"up,omitempty"`
	WithinLag bool   `json:"lag,omitempty"`
}

const pollSnapshotVersion = 1

// replicaRetryAfter is how long a follower keeps down a replica whose read
// failed here, whatever the snapshot says of it: the holder may reach a
// server that this process cannot.
const replicaRetryAfter = 2 * time.Second

// sharedPoller is the store's poller election, when processes share one
// poller (Config.PollerLease): not with the tracker's positions
// (ReplayFromStore, DirectWrites), which are shared already, nor with a
// store of one process.
func (p *Plugin) sharedPoller() (lsnstore.SharedPoller, bool) {
	if p.cfg.PollerLease < 0 || p.cfg.ReplayFromStore || p.cfg.DirectWrites {
		return nil, false
	}
	sp, ok := p.cfg.Store.(lsnstore.SharedPoller)
	return sp, ok
}

// snapshotAgeFactor: a follower reads the snapshot without its age
// (lsnstore.SnapshotGetter: one GET) when MaxLag is at least this many
// times PollerLease, taking it as published a whole lifetime ago, which
// only shortens by at most PollerLease how long its replicas' states
// stay usable (MaxLag after their poll).
const snapshotAgeFactor = 10

// sharedSnapshot reads the holder's snapshot and how long it has left to
// live: with one GET and 0 left (its whole lifetime taken as gone, less a
// slack for the store's clock running slower than this process's) when
// MaxLag allows it, else with its PTTL.
func (p *Plugin) sharedSnapshot(ctx context.Context, sp lsnstore.SharedPoller) ([]byte, time.Duration, error) {
	if g, ok := sp.(lsnstore.SnapshotGetter); ok && p.cfg.MaxLag >= snapshotAgeFactor*p.cfg.PollerLease {
		snap, err := g.GetSharedPoll(ctx)
		return snap, p.unknownAgeLeft(), err
	}
	return sp.SharedPoll(ctx)
}

// unknownAgeLeft is the time a snapshot read without its PTTL is taken to
// have left to live: none, less a slack for the store's clock running
// slower than this process's (the age rule of sharedSnapshot).
func (p *Plugin) unknownAgeLeft() time.Duration {
	return -(p.cfg.PollerLease/100 + 5*time.Millisecond)
}

// polledAt is the latest time the poll that made s can have begun, read
// at now with left of its lifetime left.
func (s pollSnapshot) polledAt(now time.Time, left time.Duration) time.Time {
	return now.Add(-(time.Duration(s.TTL)*time.Millisecond - left) - time.Duration(s.Age)*time.Microsecond)
}

// followedSnapshot is a snapshot a follower applied, and when the poll
// that made it began at the latest (its age rule: sharedSnapshot).
type followedSnapshot struct {
	s        pollSnapshot
	polledAt time.Time
	at       time.Time // when this process read it
}

// followRefresh is how long a follower's poll uses the newest snapshot
// it has (carried by a read, or its own read) before reading the store's
// again: reads carry the newest one in their own round trip, so the poll
// needs one only for what it alone does (adopting the store's token, the
// replicas' health, the primary's samples).
const followRefresh = time.Second

// parseSnapshot reads a snapshot; false when it is not one this version
// follows.
func parseSnapshot(b []byte) (pollSnapshot, bool) {
	var s pollSnapshot
	if json.Unmarshal(b, &s) != nil || s.V != pollSnapshotVersion || s.TTL <= 0 {
		return s, false // another version's holder: poll here
	}
	return s, true
}

// snapshotStates computes the replicas' states a snapshot gives (polled at
// polledAt), with what it says of each replica's health (nil when a
// failed read of this process overrides it); false when it cannot be
// used: a replica without a verified identity, an entry unreadable.
func (p *Plugin) snapshotStates(s pollSnapshot, polledAt, now time.Time) ([]*replica, []*replicaState, []*bool, bool) {
	replicas := p.replicas()
	states := make([]*replicaState, len(replicas))
	reported := make([]*bool, len(replicas))
	for i, r := range replicas {
		id := replicaIdentity(r)
		if id == "" {
			return nil, nil, nil, false
		}
		st := &replicaState{polledAt: polledAt}
		for _, e := range s.Replicas {
			if e.ID != id || !e.Up {
				continue
			}
			pos, err := lsnstore.ParsePosition(e.Pos)
			if err != nil {
				return nil, nil, nil, false
			}
			st.pos, st.up, st.withinLag = pos, true, e.WithinLag
		}
		up := st.up
		if st.up && now.Sub(r.failedAt()) < replicaRetryAfter {
			st = &replicaState{polledAt: polledAt}
		} else {
			reported[i] = &up
		}
		states[i] = st
	}
	return replicas, states, reported, true
}

// carrySnapshot makes this process's reads carry the holder's snapshot
// while it follows (lsnstore.SnapshotCarrier): only under the age rule
// that needs no PTTL (sharedSnapshot). It reports whether they do.
func (p *Plugin) carrySnapshot(on bool) bool {
	c, ok := p.cfg.Store.(lsnstore.SnapshotCarrier)
	if !ok {
		return false
	}
	on = on && p.cfg.MaxLag >= snapshotAgeFactor*p.cfg.PollerLease
	c.CarrySnapshot(on)
	return on
}

// applyCarried applies the snapshot the last read carried, when it is new,
// to the replicas' states: the read that carried it then routes on it.
// Called after each answered store read.
func (p *Plugin) applyCarried() {
	c, ok := p.cfg.Store.(lsnstore.SnapshotCarrier)
	if !ok || p.leading.Load() {
		return
	}
	raw, seq := c.CarriedSnapshot()
	if last := p.carriedSeq.Load(); seq == 0 || seq == last || !p.carriedSeq.CompareAndSwap(last, seq) {
		return // applied already (by this read's or another's)
	}
	if raw == "" {
		p.followDue.Store(true) // no holder: the poll looks, and may take over
		return
	}
	s, ok := parseSnapshot([]byte(raw))
	if !ok {
		p.followDue.Store(true)
		return
	}
	now := time.Now()
	polledAt := s.polledAt(now, p.unknownAgeLeft())
	replicas, states, _, ok := p.snapshotStates(s, polledAt, now)
	if !ok {
		p.followDue.Store(true)
		return
	}
	p.followed.Store(&followedSnapshot{s: s, polledAt: polledAt, at: now})
	for i, r := range replicas {
		r.state.Store(states[i])
	}
}

// followOnce is a follower's poll: take the replicas' states from the
// holder's snapshot (the newest a read carried, or the store's), and
// check the store: adopt the token the holder verified, or verify the
// store itself when it must (followStore). It reports false, having
// changed nothing, when there is no snapshot it can use: the caller then
// polls the servers itself.
func (p *Plugin) followOnce(ctx context.Context, sp lsnstore.SharedPoller) bool {
	carried := p.carrySnapshot(true)
	now := time.Now()
	f := p.followed.Load()
	due := p.followDue.Swap(false)
	if f == nil || !carried || now.Sub(f.at) >= p.followRefresh || due || p.waitingPoll.Load() > 0 {
		snap, left, err := p.sharedSnapshot(ctx, sp)
		if err != nil || snap == nil {
			return false
		}
		s, ok := parseSnapshot(snap)
		if !ok {
			return false
		}
		now = time.Now()
		// The poll began this long ago at the most (the store's clock
		// for the time since it was published, which no clock skew
		// touches).
		polledAt := s.polledAt(now, left)
		f = &followedSnapshot{s: s, polledAt: polledAt, at: now}
	}
	s, polledAt := f.s, f.polledAt
	replicas, states, reported, ok := p.snapshotStates(s, polledAt, now)
	if !ok {
		return false
	}
	p.followed.Store(f)

	epoch, verified := p.followStore(ctx, s.Token)
	if verified {
		var ins lsnstore.Position
		var err error
		if epoch.Changed {
			// The loss floor is the primary's position read after the
			// verification (or after the snapshot whose token it
			// adopts was read), and after the lapsed writers'
			// connections ended (writer_fence.go): read here, once.
			if !p.fenceWithOwnBudget(ctx) {
				verified = false
			} else if ins, _, err = p.engine.primaryPositions(ctx, p.primaryDB); err != nil {
				verified = false
			}
		}
		if verified {
			p.acceptStore(ctx, epoch, ins, now)
		}
	}
	if pos, err := lsnstore.ParsePosition(s.Primary); err == nil && s.Primary != "" {
		p.lastPrimary.Store(&pos)
		// Kept as the primary's samples are by a poll, so that this
		// process, if it takes the poller's lease over, judges the
		// replicas against MaxLag from the history it followed, not from
		// its own first poll (which, younger than MaxLag, would take
		// replicas that merely paused for being outside it). Stamped
		// with polledAt, at or before when the holder read it: a sample
		// taken as older than it is can only raise the threshold.
		p.addPrimarySample(primarySample{at: polledAt, pos: pos})
		p.trimPrimarySamples(now)
	}
	for i, r := range replicas {
		r.state.Store(states[i])
		if reported[i] != nil {
			p.noteFollowedHealth(ctx, r, *reported[i])
		}
	}
	p.expireLossFloor(now)
	p.checkEviction(ctx, now)
	p.retryPending(ctx)
	if now.Sub(p.depsCheckedAt) >= dependentsRefresh || p.staleDue(now) {
		p.depsCheckedAt = now
		p.refreshDependents(ctx, now, true)
	}
	return true
}

// followStore is a follower's check of the store: the token the holder's
// poll verified (token), adopted when the reader allows it
// (lsnstore.Adopter: docs/design/topology.md, "What a follower asks of
// the store"), else a verification of its own.
func (p *Plugin) followStore(ctx context.Context, token string) (lsnstore.Epoch, bool) {
	if a, ok := p.cfg.Store.(lsnstore.Adopter); ok && token != "" {
		if e, ok := a.Adoptable(token); ok {
			// The store answered the snapshot's read: reads may consult
			// it again at once, as after a verification.
			p.breaker.Success()
			return e, true
		}
	}
	return p.verifyStore(ctx)
}

// lead publishes what this process's own poll (begun at began) found,
// with the store's token it verified and accepted ("" when it did not),
// taking or renewing the poller's lease; p.leading says whether it holds
// it. Any failure leaves the lease to others.
func (p *Plugin) lead(ctx context.Context, sp lsnstore.SharedPoller, began time.Time, token string) {
	s := pollSnapshot{V: pollSnapshotVersion, TTL: p.cfg.PollerLease.Milliseconds(), Token: token}
	if last := p.lastPrimary.Load(); last != nil {
		s.Primary = last.String()
	}
	for _, r := range p.replicas() {
		id := replicaIdentity(r)
		if id == "" {
			continue
		}
		e := snapshotReplica{ID: id}
		if st := r.state.Load(); st != nil && st.up {
			e.Pos, e.Up, e.WithinLag = st.pos.String(), true, st.withinLag
		}
		s.Replicas = append(s.Replicas, e)
	}
	s.Age = time.Since(began).Microseconds()
	b, err := json.Marshal(s)
	if err != nil {
		p.leading.Store(false)
		return
	}
	held, err := sp.PublishPoll(ctx, p.pollerMember, p.cfg.PollerLease, b, p.cfg.PollerLease)
	p.leading.Store(err == nil && held)
}

// resign gives the poller's lease up (resting or closing), so that a
// follower takes it over at its next poll instead of after PollerLease.
func (p *Plugin) resign(ctx context.Context) {
	if sp, ok := p.sharedPoller(); ok && p.leading.Swap(false) {
		_ = sp.ResignPoller(ctx, p.pollerMember)
	}
}

// replicaIdentity is the server identity verified for r's DSN (endpoint.go),
// "" when none was.
func replicaIdentity(r *replica) string {
	v, ok := endpoints.Load(weak.Make(r.db))
	if !ok {
		return ""
	}
	e := v.(*endpoint)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.trusted {
		return ""
	}
	return e.id
}
