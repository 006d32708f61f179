package plugin

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/lsnstore"
)

// Overlapped reads (docs/measurements/benchmarks.md): a read that needs the
// store's write positions does not wait for them before it starts. It
// starts on a replica the policy picks among those that cover what is
// known locally (the session's position), while the store is asked in
// another goroutine; when both have answered, the replica's rows are kept
// only if the replica's replay position, as the poller knew it before the
// query was sent, covers the required position (the session's, the
// store's, the floor). A position known before the query is never ahead of
// what the query saw, so this is the rule of the sequential path applied
// to the same facts; otherwise the rows are discarded and the read runs
// where that rule sends it (another fresh replica, a wait with MaxWait,
// the primary). The latency of a read kept on its replica is the larger of
// the query and the store round trip instead of their sum.

// storeLookup is one asynchronous ask of the store, recycled.
type storeLookup struct {
	done chan struct{}
	// sent is when the read asked; timer bounds its wait (waitLive).
	sent  time.Time
	timer *time.Timer
	pos   lsnstore.Position
	err   error
	// ctx and tables are the read's, for a batched ask (batch.go).
	ctx    context.Context
	tables []string
	next   *storeLookup // the batcher's queue
}

var storeLookups = sync.Pool{New: func() any { return &storeLookup{done: make(chan struct{}, 1)} }}

// startLookup asks the store for tables' required position (what
// tablesPosition returns) asynchronously: through the batcher when the
// store answers batches, else in a goroutine of its own. The caller waits
// for it once (wait).
func (p *Plugin) startLookup(ctx context.Context, tables []string) *storeLookup {
	l := storeLookups.Get().(*storeLookup)
	if p.batcher != nil {
		l.ctx, l.tables, l.sent = ctx, tables, time.Now()
		p.batcher.submit(l)
		return l
	}
	go l.run(ctx, p, tables)
	return l
}

func (l *storeLookup) run(ctx context.Context, p *Plugin, tables []string) {
	l.finish(p.tablesPosition(ctx, tables))
}

// finish delivers the answer to the waiter.
func (l *storeLookup) finish(pos lsnstore.Position, err error) {
	l.pos, l.err = pos, err
	l.done <- struct{}{}
}

// errStoreSilent is a read's lookup given up on: past the store's read
// bound nothing of the store answered (lsnstore.Liveness).
var errStoreSilent = errors.New("plugin: the position store answered nothing within its read bound")

// waitFor is wait, bounded when the lookup is batched for a store that
// tells slow from gone (lsnstore.Liveness): past the store's read bound,
// the read keeps waiting only while the store answers something (another
// batch, a raise, the poll's verification) within each bound; otherwise it
// gives up with errStoreSilent, and l, which the batcher will still
// answer, is left to the garbage collector.
func (l *storeLookup) waitFor(p *Plugin) (lsnstore.Position, error) {
	var live lsnstore.Liveness
	if p.batcher != nil {
		live = p.batcher.live
	}
	if live == nil {
		return l.wait()
	}
	select {
	case <-l.done: // answered already, as usual by the time the rows are in: no timer
		return l.take()
	default:
	}
	bound := live.ReadBound()
	if l.timer == nil {
		l.timer = time.NewTimer(bound)
	} else {
		l.timer.Reset(bound)
	}
	since := l.sent
	for {
		select {
		case <-l.done:
			l.timer.Stop()
			return l.take()
		case <-l.timer.C:
			if !live.AnsweredSince(since) {
				return lsnstore.Position{}, errStoreSilent
			}
			since = time.Now()
			l.timer.Reset(bound)
		}
	}
}

// wait returns the answer and recycles l.
func (l *storeLookup) wait() (lsnstore.Position, error) {
	<-l.done
	return l.take()
}

// take returns the answer delivered and recycles l.
func (l *storeLookup) take() (lsnstore.Position, error) {
	pos, err := l.pos, l.err
	l.pos, l.err, l.ctx, l.tables = lsnstore.Position{}, nil, nil, nil
	storeLookups.Put(l)
	return pos, err
}

// overlapPool is the pool of a read started on a replica while its
// lookup runs. Its first query decides; any later call on it (GORM makes
// one per statement) goes where that decision sent the read.
type overlapPool struct {
	gorm.ConnPool // the candidate replica's pool, for what reads do not use
	p             *Plugin
	// ctx is the read's context as routing saw it: decisions are
	// reported on it (OnDecision, its span), not on the context of the
	// query that decides, which may carry a span a tracing plugin started
	// for the statement after routing.
	ctx     context.Context
	cand    *replica
	session lsnstore.Position // the caller's session position
	tables  []string          // the read's tables (decisions)
	keys    []string          // the keyed positions looked up, if any (decisions)
	lookup  *storeLookup
	primary gorm.ConnPool // the statement's primary pool
	mu      sync.Mutex
	final   gorm.ConnPool // once decided
}

// overlap starts the read of db on a replica that covers local (the
// session position and the floor), with its store lookup running
// meanwhile. false: no replica covers it (the caller goes on without
// overlapping).
func (p *Plugin) overlap(db *gorm.DB, tables, lookup []string, session, local lsnstore.Position, keys []string) bool {
	pool, _ := p.freshReplica(local)
	rp, ok := pool.(*replicaPool)
	if !ok {
		return false
	}
	db.Statement.ConnPool = &overlapPool{
		ConnPool: rp, p: p, ctx: db.Statement.Context, cand: rp.r, session: session, tables: tables, keys: keys,
		lookup: p.startLookup(db.Statement.Context, lookup), primary: db.ConnPool,
	}
	return true
}

func (o *overlapPool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.final != nil {
		return o.final.QueryContext(ctx, query, args...)
	}
	// The candidate's position before the query is sent: the rows can only
	// be at least this fresh.
	st := o.cand.state.Load()
	if !st.usable(time.Now(), o.p.cfg.MaxLag) {
		return o.rerun(ctx, query, args) // it went down since routing
	}
	if !o.cand.enter() {
		o.p.replicaRemoved(o.ctx, o.cand)
		return o.rerun(ctx, query, args)
	}
	defer o.cand.leave()
	rows, err, stalled := o.p.queryReplica(ctx, o.cand, query, args)
	if stalled {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		o.p.replicaStalled(o.ctx, o.cand)
		return o.rerun(ctx, query, args)
	}
	if err != nil && o.p.engine.retryable(ctx, err) {
		o.p.replicaFailed(o.ctx, o.cand, err)
		return o.rerun(ctx, query, args)
	}
	required, lerr := o.required()
	if lerr == nil && st.pos.Covers(required) {
		o.final = o.cand.pool
		o.p.usedReplica(o.ctx, o.cand, ReasonFresh, o.tables, required, o.note())
		return rows, err
	}
	if rows != nil {
		rows.Close()
	}
	o.p.stats.overlapDiscarded.Add(1)
	o.final = o.p.resolve(o.ctx, o.primary, o.tables, required, lerr, o.note())
	return o.final.QueryContext(ctx, query, args...)
}

// rerun runs the query where the sequential rule sends it, once the lookup
// has answered.
func (o *overlapPool) rerun(ctx context.Context, query string, args []any) (*sql.Rows, error) {
	required, err := o.required()
	o.final = o.p.resolve(o.ctx, o.primary, o.tables, required, err, o.note())
	return o.final.QueryContext(ctx, query, args...)
}

// QueryRowContext cannot take back a *sql.Row: it waits for the lookup,
// then runs where the rule sends it.
func (o *overlapPool) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return o.decide().QueryRowContext(ctx, query, args...)
}

// ExecContext is not a read: the primary, once the lookup is done with.
func (o *overlapPool) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	o.decide()
	return o.primary.ExecContext(ctx, query, args...)
}

// BeginTx begins on the primary (replicaPool.BeginTx).
func (o *overlapPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	return o.p.primary.BeginTx(ctx, opts)
}

func (o *overlapPool) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return o.decide().PrepareContext(ctx, query)
}

func (o *overlapPool) GetDBConn() (*sql.DB, error) { return o.cand.db, nil }

// decide waits for the lookup and chooses the pool without a speculative
// query.
func (o *overlapPool) decide() gorm.ConnPool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.final == nil {
		required, err := o.required()
		o.final = o.p.resolve(o.ctx, o.primary, o.tables, required, err, o.note())
	}
	return o.final
}

// note is the routing note of the overlapped read: one store round trip.
func (o *overlapPool) note() routeNote { return routeNote{keys: o.keys, trips: 1} }

func (o *overlapPool) required() (lsnstore.Position, error) {
	pos, err := o.lookup.waitFor(o.p)
	if err != nil {
		return lsnstore.Position{}, err
	}
	return o.session.Merge(pos), nil
}

// resolve is the sequential rule once the required position is known (or
// the lookup failed): a fresh replica, a wait with MaxWait, the primary.
func (p *Plugin) resolve(ctx context.Context, primary gorm.ConnPool, tables []string, required lsnstore.Position, lookupErr error, note routeNote) gorm.ConnPool {
	if lookupErr != nil {
		if p.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
			p.cfg.Logger.DebugContext(ctx, "freshread: store unavailable, read goes to the primary", "err", lookupErr)
		}
		return p.fallbackTo(ctx, primary, Decision{Target: Primary, Reason: ReasonStoreError, Tables: tables, Keys: note.keys, StoreRoundTrips: note.trips})
	}
	pool, best := p.freshReplica(required)
	if pool == nil && p.cfg.MaxWait > 0 {
		start := time.Now()
		pool, best = p.waitFresh(ctx, required)
		note.waited = time.Since(start)
	}
	if pool == nil {
		return p.fallbackTo(ctx, primary, Decision{Target: Primary, Reason: p.laggingOrNone(), Tables: tables, Keys: note.keys, Required: required,
			ReplicaPosition: best, Waited: note.waited, StoreRoundTrips: note.trips})
	}
	var r *replica
	if rp, ok := pool.(*replicaPool); ok {
		r = rp.r
	}
	p.usedReplica(ctx, r, ReasonFresh, tables, required, note)
	return pool
}
