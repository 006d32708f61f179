package plugin

import (
	"context"
	"database/sql"
	"log/slog"
	"math/rand/v2"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/lsnstore"
)

// dbresolver's hint settings (dbresolver.Write / dbresolver.Read store
// these keys in Statement.Settings). Tested against dbresolver itself.
const (
	dbresolverWrite = "gorm:db_resolver:write"
	dbresolverRead  = "gorm:db_resolver:read"
)

// routeRead chooses the pool of a Query or Row statement. It runs before
// every other callback of the chain.
func (p *Plugin) routeRead(db *gorm.DB) {
	if db.Error != nil {
		return
	}
	p.demand(true)
	stmt := db.Statement
	ctx := stmt.Context
	switch stmt.ConnPool.(type) {
	case *replaySession:
		if p.cfg.keyed() && stmt.SQL.Len() == 0 {
			p.learnModelKey(stmt) // for the session's raw SQL
		}
		return // a Session routes each statement itself
	case *sql.Conn:
		// db.Connection pins one connection (session state lives there):
		// its statements stay on it, and a raw write there is published
		// as on the pool.
		p.decided(ctx, Decision{Target: Primary, Reason: ReasonPinned})
		if stmt.SQL.Len() > 0 {
			p.followPinned(db, stmt.SQL.String())
			if c := p.classify(stmt.SQL.String()); c.kind == kindWrite && (c.writes == nil || len(c.writes) > 0) {
				p.recordAutocommitRawWrite(db, c)
			}
		} else if walkStatement(stmt, p.classifier).write {
			p.recordAutocommitRawWrite(db, fragmentWrite)
		}
		return
	}

	var (
		tables []string
		known  bool
		opaque bool // reads rows other than those it pins: not keyed
		raw    = stmt.SQL.Len() > 0
		c      rawClass
	)
	if raw {
		c = p.classify(stmt.SQL.String())
	}

	// Inside a transaction everything stays on its connection (the
	// primary); a write there is marked for the commit to publish.
	if _, inTx := stmt.ConnPool.(gorm.TxCommitter); inTx {
		switch {
		case raw && c.kind == kindWrite && (c.writes == nil || len(c.writes) > 0):
			p.recordRawWrite(db, c)
		case !raw && walkStatement(stmt, p.classifier).write:
			p.recordRawWrite(db, fragmentWrite)
		}
		p.decided(ctx, Decision{Target: Primary, Reason: ReasonTransaction})
		return
	}
	if raw {
		switch {
		case c.kind == kindWrite:
			reason := ReasonWrite
			if c.locks {
				reason = ReasonLocking
			}
			p.toPrimary(db, reason, nil)
			if c.writes == nil || len(c.writes) > 0 {
				p.recordAutocommitRawWrite(db, c)
			}
			return
		case c.kind != kindRead:
			p.toPrimary(db, ReasonUnknownSQL, nil)
			return
		case c.locks:
			p.toPrimary(db, ReasonLocking, nil)
			return
		}
		tables, known = c.reads, c.readsKnown
	} else {
		wk := walkStatement(stmt, p.classifier)
		_, locking := stmt.Clauses["FOR"]
		switch {
		case wk.write:
			// Text written by hand calls a function that writes: a
			// write of unknown tables, as raw SQL that does.
			reason := ReasonWrite
			if locking {
				reason = ReasonLocking
			}
			p.toPrimary(db, reason, nil)
			p.recordAutocommitRawWrite(db, fragmentWrite)
			return
		case locking, wk.locks:
			p.toPrimary(db, ReasonLocking, nil)
			return
		case wk.session:
			p.toPrimary(db, ReasonUnknownSQL, nil)
			return
		}
		tables, known, opaque = wk.tables, wk.known, wk.opaque
	}
	if !known {
		tables = nil
		p.stats.unknownTables.Add(1)
	}

	if _, ok := stmt.Settings.Load(dbresolverWrite); ok {
		p.toPrimary(db, ReasonHint, tables)
		return
	}
	if _, ok := stmt.Settings.Load(dbresolverRead); ok {
		p.toAnyReplica(db, ReasonHint, tables)
		return
	}
	switch consistencyFrom(ctx, p.cfg.Consistency) {
	case Strong:
		p.toPrimary(db, ReasonConsistency, tables)
	case Eventual:
		if s := SessionFrom(ctx); s != nil && p.cfg.StickyWindow > 0 && s.wroteWithin(time.Now(), p.cfg.StickyWindow) {
			p.toPrimary(db, ReasonSticky, tables)
			return
		}
		p.toAnyReplica(db, ReasonConsistency, tables)
	case Session:
		p.toFresh(db, tables, nil, false, false)
	default:
		lookup, keyed := tables, false
		if p.cfg.keyed() && len(tables) == 1 && !opaque {
			var names []string
			var ok bool
			if raw {
				names, ok = p.rawKeyedReadNames(ctx, c.pinned, tables[0], stmt.Vars)
			} else {
				names, ok = p.keyedReadNames(stmt, tables[0])
			}
			if ok {
				lookup, keyed = names, true
			}
		}
		p.toFresh(db, tables, lookup, true, keyed)
	}
}

func (p *Plugin) toPrimary(db *gorm.DB, reason Reason, tables []string) {
	db.Statement.ConnPool = p.fallbackTo(db.Statement.Context, db.ConnPool, Decision{Target: Primary, Reason: reason, Tables: tables})
}

// toAnyReplica picks any usable replica regardless of freshness
// (dbresolver.Read, Eventual).
func (p *Plugin) toAnyReplica(db *gorm.DB, reason Reason, tables []string) {
	// Every usable replica has replayed the empty position.
	pool, _ := p.freshReplica(lsnstore.Position{})
	if pool == nil {
		p.toPrimary(db, ReasonNoReplica, tables)
		return
	}
	p.use(db, pool, reason, tables, lsnstore.Position{})
}

// toFresh sends the read to a replica that has replayed the required
// position: the caller's session position, and with tableWrites the write
// positions of lookup (the read's tables, or its keys' positions: one
// store round trip). keyed: lookup names keyed positions, not tables. Any
// doubt: the primary.
func (p *Plugin) toFresh(db *gorm.DB, tables, lookup []string, tableWrites, keyed bool) {
	ctx := db.Statement.Context
	if len(p.replicas()) == 0 {
		p.toPrimary(db, ReasonNoReplica, tables)
		return
	}
	if p.pending.suspect.Load() {
		p.toPrimary(db, ReasonStoreError, tables)
		return
	}
	var required lsnstore.Position
	if s := SessionFrom(ctx); s != nil {
		if p.cfg.StickyWindow > 0 && s.wroteWithin(time.Now(), p.cfg.StickyWindow) {
			p.toPrimary(db, ReasonSticky, tables)
			return
		}
		required = p.sessionPosition(ctx, s)
	}
	var note routeNote
	if keyed {
		note.keys = lookup
	}
	if tableWrites && p.overlapping && !db.DryRun && !p.breakerOpen() {
		local := p.withFloor(required)
		if p.overlap(db, tables, lookup, required, local, note.keys) {
			return
		}
		if p.cfg.MaxWait == 0 {
			// No replica covers what is known locally: the store's answer
			// could only require more.
			db.Statement.ConnPool = p.fallbackTo(ctx, db.ConnPool, Decision{Target: Primary, Reason: p.laggingOrNone(), Tables: tables, Keys: note.keys, Required: local})
			return
		}
	}
	var err error
	if tableWrites {
		var pos lsnstore.Position
		pos, err = p.tablesPosition(ctx, lookup)
		required = required.Merge(pos)
		if err != errBreakerOpen {
			note.trips = 1
		}
	}
	db.Statement.ConnPool = p.resolve(ctx, db.ConnPool, tables, required, err, note)
}

// tablesPosition is the position a Table read of tables must wait for: the
// tables' write positions (one store round trip) and the floor (floor.go:
// while the tracker's decoding of direct writes is missing or behind, and
// after a store discontinuity).
func (p *Plugin) tablesPosition(ctx context.Context, tables []string) (lsnstore.Position, error) {
	var pos lsnstore.Position
	err := p.askStore(func() (err error) {
		pos, err = p.cfg.Store.WritePosition(ctx, tables)
		return err
	})
	if err != nil {
		return lsnstore.Position{}, err
	}
	return p.withFloor(pos), nil
}

// withFloor merges the floor (floor.go), if any, into pos.
func (p *Plugin) withFloor(pos lsnstore.Position) lsnstore.Position {
	if floor := p.floor.Load(); floor != nil {
		return pos.Merge(*floor)
	}
	return pos
}

// askStore runs one store call (a read's lookup, or a batch of them)
// through the circuit breaker and records its latency. The store bounds
// its own calls (lsnstore.RedisOptions.Timeout).
func (p *Plugin) askStore(ask func() error) error {
	now := time.Now()
	if !p.breaker.Allow(now) {
		return errBreakerOpen
	}
	err := ask()
	p.stats.storeLatency(time.Since(now))
	if err != nil {
		if !lsnstore.IsDiscontinuity(err) { // the store answered: not an outage
			p.breaker.Failure(now, p.cfg.BreakerFailures)
		} else {
			p.followDue.Store(true) // a follower's next poll adopts or verifies
		}
		return err
	}
	p.breaker.Success()
	p.applyCarried()
	return nil
}

// freshReplica returns a usable replica whose replay position covers
// required (chosen by the Policy among all such), or nil and the replay
// position of the least lagging usable replica.
func (p *Plugin) freshReplica(required lsnstore.Position) (gorm.ConnPool, lsnstore.Position) {
	now := time.Now()
	if p.randomPolicy {
		return p.freshReplicaRandom(now, required)
	}
	var (
		buf  [8]gorm.ConnPool
		best laggard
	)
	fresh := buf[:0]
	for _, r := range p.replicas() {
		st := r.state.Load()
		if !st.usable(now, p.cfg.MaxLag) {
			continue
		}
		if st.pos.Covers(required) {
			fresh = append(fresh, r.pool)
		} else {
			best.consider(r, st.pos, required)
		}
	}
	if len(fresh) == 0 {
		return nil, best.pos
	}
	return p.pick(fresh), lsnstore.Position{}
}

// laggard finds the usable replica that is least behind a required
// position (Position.Lag).
type laggard struct {
	r   *replica
	pos lsnstore.Position
	lag uint64
}

func (l *laggard) consider(r *replica, pos, required lsnstore.Position) {
	if lag := pos.Lag(required); l.r == nil || lag < l.lag {
		l.r, l.pos, l.lag = r, pos, lag
	}
}

// freshReplicaRandom is freshReplica for the default RandomPolicy, without
// building the candidate list (no allocation on the read path): count the
// fresh replicas, draw one, find it again.
func (p *Plugin) freshReplicaRandom(now time.Time, required lsnstore.Position) (gorm.ConnPool, lsnstore.Position) {
	var (
		n        int
		best     laggard
		replicas = p.replicas()
	)
	for _, r := range replicas {
		st := r.state.Load()
		if !st.usable(now, p.cfg.MaxLag) {
			continue
		}
		if st.pos.Covers(required) {
			n++
		} else {
			best.consider(r, st.pos, required)
		}
	}
	if n == 0 {
		return nil, best.pos
	}
	k := 0
	if n > 1 {
		k = rand.IntN(n)
	}
	for _, r := range replicas {
		st := r.state.Load()
		if st.usable(now, p.cfg.MaxLag) && st.pos.Covers(required) {
			if k == 0 {
				return r.pool, lsnstore.Position{}
			}
			k--
		}
	}
	// A replica's state changed between the two passes: take none (the
	// caller goes to the primary or waits), never a replica not seen fresh.
	return nil, best.pos
}

// routeNote is what a read's routing learnt on its way, for its Decision:
// the keyed positions it looked up, its store round trips and how long it
// waited for a replica.
type routeNote struct {
	keys   []string
	trips  int
	waited time.Duration
}

// waitFresh waits up to MaxWait for a replica to become fresh: on the
// replica itself when the engine can (MASTER_GTID_WAIT), else by waiting
// for the poller to report one.
func (p *Plugin) waitFresh(ctx context.Context, required lsnstore.Position) (gorm.ConnPool, lsnstore.Position) {
	if w, ok := p.engine.(causalWaiter); ok {
		return p.waitOnReplica(ctx, w, required)
	}
	timer := time.NewTimer(p.cfg.MaxWait)
	defer timer.Stop()
	// A follower's polls read the holder's snapshot while reads wait.
	p.waitingPoll.Add(1)
	defer p.waitingPoll.Add(-1)
	var best lsnstore.Position
	for {
		tick := *p.tick.Load()
		select {
		case <-tick:
		case <-timer.C:
			return nil, best
		case <-ctx.Done():
			return nil, best
		}
		var pool gorm.ConnPool
		if pool, best = p.freshReplica(required); pool != nil {
			return pool, lsnstore.Position{}
		}
	}
}

// waitOnReplica waits on the usable replica least behind required.
func (p *Plugin) waitOnReplica(ctx context.Context, w causalWaiter, required lsnstore.Position) (gorm.ConnPool, lsnstore.Position) {
	now := time.Now()
	var best laggard
	for _, r := range p.replicas() {
		if st := r.state.Load(); st.usable(now, p.cfg.MaxLag) {
			best.consider(r, st.pos, required)
		}
	}
	if best.r == nil || !best.r.enter() {
		return nil, lsnstore.Position{}
	}
	ok, err := w.waitApplied(ctx, best.r.db, required, p.cfg.MaxWait)
	best.r.leave()
	if err != nil || !ok {
		return nil, best.pos
	}
	return best.r.pool, lsnstore.Position{}
}

func (p *Plugin) pick(pools []gorm.ConnPool) gorm.ConnPool {
	if len(pools) == 1 {
		return pools[0]
	}
	return p.cfg.Policy.Resolve(pools)
}

func (p *Plugin) use(db *gorm.DB, pool gorm.ConnPool, reason Reason, tables []string, required lsnstore.Position) {
	db.Statement.ConnPool = pool
	var r *replica
	if rp, ok := pool.(*replicaPool); ok {
		r = rp.r
	}
	p.usedReplica(db.Statement.Context, r, reason, tables, required, routeNote{})
}

// usedReplica reports a read sent to replica r (nil: unknown).
func (p *Plugin) usedReplica(ctx context.Context, r *replica, reason Reason, tables []string, required lsnstore.Position, note routeNote) {
	if !p.observed(ctx) {
		p.stats.decision(ReplicaTarget, reason)
		return
	}
	d := Decision{Target: ReplicaTarget, Reason: reason, Tables: tables, Required: required,
		Keys: note.keys, Waited: note.waited, StoreRoundTrips: note.trips}
	if r != nil {
		d.Replica = r.name
		d.ReplicaPosition = r.state.Load().pos
	}
	p.decided(ctx, d)
}

func (p *Plugin) observed(ctx context.Context) bool {
	return p.cfg.OnDecision != nil || p.cfg.Logger.Enabled(ctx, slog.LevelDebug) || p.traced(ctx)
}

func (p *Plugin) decided(ctx context.Context, d Decision) {
	p.stats.decision(d.Target, d.Reason)
	if d.Keys != nil && p.observed(ctx) {
		d.Keys = displayNames(d.Keys) // display_names.go
	}
	if p.cfg.OnDecision != nil {
		p.cfg.OnDecision(ctx, d)
	}
	p.traceDecision(ctx, d)
	if p.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
		p.cfg.Logger.DebugContext(ctx, "freshread: route", "target", d.Target.String(), "replica", d.Replica,
			"reason", string(d.Reason), "tables", d.Tables, "required", d.Required.String(), "replica_pos", d.ReplicaPosition.String())
	}
}

// replicaFailed marks r down until the next poll answers, and reports the
// retry on the primary.
func (p *Plugin) replicaFailed(ctx context.Context, r *replica, err error) {
	r.failed.Store(time.Now().UnixNano())
	r.state.Store(&replicaState{polledAt: time.Now()})
	p.cfg.Logger.WarnContext(ctx, "freshread: replica failed; read retried on the primary", "replica", r.name, "err", err)
	p.decided(ctx, Decision{Target: Primary, Replica: r.name, Reason: ReasonReplicaFailed})
}
