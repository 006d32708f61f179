package plugin

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// pendingWrites holds writes whose positions could not be published (store
// down, or the position could not be read), and writes held until a
// transaction the plugin did not begin ends (foreign_tx.go). While any are
// pending or held the store is suspect and this process sends every read to
// the primary; the poller publishes them with a fresh (higher, so still
// correct) position.
type pendingWrites struct {
	suspect atomic.Bool
	// holding counts the held writes, so that statements check for one
	// to confirm with an atomic load only.
	holding atomic.Int32
	mu      sync.Mutex
	w       writeSet
	held    []*foreignWrite
}

// hold adds a write held until its transaction ends.
func (pw *pendingWrites) hold(fw *foreignWrite) {
	pw.mu.Lock()
	pw.held = append(pw.held, fw)
	pw.holding.Add(1)
	pw.suspect.Store(true)
	pw.mu.Unlock()
}

// release turns a held write into a pending one.
func (pw *pendingWrites) release(fw *foreignWrite) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	for i, h := range pw.held {
		if h == fw {
			pw.held = append(pw.held[:i], pw.held[i+1:]...)
			pw.holding.Add(-1)
			pw.w.merge(fw.w)
			return
		}
	}
}

// heldWrites returns the held writes (a copy of the list).
func (pw *pendingWrites) heldWrites() []*foreignWrite {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return append([]*foreignWrite(nil), pw.held...)
}

func (pw *pendingWrites) add(w writeSet) {
	pw.mu.Lock()
	pw.w.merge(w)
	pw.suspect.Store(true)
	pw.mu.Unlock()
}

// take removes and returns the pending writes.
func (pw *pendingWrites) take() (writeSet, bool) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	w := pw.w
	pw.w = writeSet{}
	return w, !w.empty()
}

// currentPosition reads the primary's WAL insert position. Called after
// COMMIT returned, it is at or past the commit record, so a replica that has
// replayed it sees the transaction. (Read inside the transaction it would be
// below the commit record: the stale-read trap of the field notes.)
func (p *Plugin) currentPosition(ctx context.Context) (lsnstore.Position, error) {
	return p.engine.writePosition(ctx, p.primaryDB)
}

// publish records w's position after its commit: the caller's session
// first (in process, cannot fail), then the store.
func (p *Plugin) publish(ctx context.Context, w writeSet) {
	committed := time.Now()
	ctx, cancel := p.publishContext(ctx)
	defer cancel()
	pos, err := p.currentPosition(ctx)
	p.publishAt(ctx, w, pos, err, committed)
}

// publishContext is the context of a publication: not cancelled with the
// caller's (the write happened), bounded by Config.PublishTimeout.
func (p *Plugin) publishContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), p.cfg.PublishTimeout)
}

// publishAt publishes w at pos, read after its commit, which returned at
// committed (err: the position could not be read), in a context from
// publishContext.
func (p *Plugin) publishAt(ctx context.Context, w writeSet, pos lsnstore.Position, err error, committed time.Time) {
	if s := SessionFrom(ctx); s != nil {
		s.wrote(time.Now())
	}
	if err != nil {
		p.cfg.Logger.WarnContext(ctx, "freshread: cannot read the primary's position after commit; the write committed, and reads go to the primary until the poller publishes it: check that the primary is up and reachable from this process (err says what failed), or raise Config.PublishTimeout if it is only slow",
			"err", redact(err, p.primarySecrets))
		p.unpublished(ctx, w, committed)
		return
	}
	if s := SessionFrom(ctx); s != nil {
		s.raise(p.cluster, pos)
	}
	if err := p.raise(ctx, w, pos); err != nil {
		p.cfg.Logger.WarnContext(ctx, "freshread: cannot publish write position; this process reads from the primary until its poller publishes it: check that Redis is up and reachable from this process (err says what failed; NOPERM: grant the Redis user the commands of the operations guide, Redis permissions), or raise RedisOptions.MaxTimeout and Config.PublishTimeout if Redis is only slow",
			"err", err)
		p.unpublished(ctx, w, committed)
	}
}

// unpublished keeps w, committed (or perhaps committed) by committed but
// missing from the store, pending in this process, and tells the other
// processes sharing the store (lsnstore.Invalidator): until their pollers
// have verified the store again and taken the primary's position, past
// the write, as their floor, they read from the primary. When the store
// cannot be told either (unreachable from this process, not from the
// others), it waits for this process's lease to end, which tells them the
// same (lease.go). It runs before the commit returns, so no read that
// begins after the write was acknowledged can miss it
// (docs/design/reliability.md).
func (p *Plugin) unpublished(ctx context.Context, w writeSet, committed time.Time) {
	p.pending.add(w)
	p.tellUnpublished(ctx, w, committed)
}

// tellUnpublished tells the other processes of a write this one could not
// publish (unpublished): it invalidates the store, or else waits for its
// lease to end.
func (p *Plugin) tellUnpublished(ctx context.Context, w writeSet, committed time.Time) {
	inv, ok := p.cfg.Store.(lsnstore.Invalidator)
	if !ok {
		return
	}
	// Its own context: the caller's may be cancelled, or spent on the
	// position read that failed (a primary that hung after COMMIT), and
	// Redis may answer.
	ictx, cancel := p.publishContext(ctx)
	err := inv.Invalidate(ictx)
	cancel()
	if err == nil {
		return
	}
	if p.awaitLease(context.WithoutCancel(ctx), w, committed) {
		p.cfg.Logger.WarnContext(ctx, "freshread: could not publish a write nor reach the position store; acknowledged it once this process's lease in the store ended, so other processes read it from the primary or fresh replicas", "err", err)
		return
	}
	p.stats.unprotectedWrites.Add(1)
	p.cfg.Logger.ErrorContext(ctx, "freshread: a committed write could not be published and the other processes could not be told (the position store is unreachable from this process, and the write committed after its lease in the store had ended or with leases off); they may read it stale until this process reaches the store: check the network between this process and Redis", "err", err)
}

// capKeys bounds the key positions one raise carries (a transaction's
// statements each prove at most maxKeys, but their union may hold more, as
// in a CreateInBatches of many rows): past maxKeys, every keyed name is
// replaced by its plain table, which raises the table's unkeyed position.
func capKeys(w writeSet) writeSet {
	n := 0
	for t := range w.tables {
		if lsnstore.IsKeyName(t) {
			n++
		}
	}
	if n <= maxKeys {
		return w
	}
	out := writeSet{unknown: w.unknown, schema: w.schema, marks: w.marks, tables: make(map[string]struct{}, len(w.tables)-n)}
	for t := range w.tables {
		base, _ := lsnstore.KeyedBase(t)
		out.tables[base] = struct{}{}
	}
	return out
}

// raise publishes pos for w's tables and their dependents. A dependent
// "*" (anything) raises the unknown-tables position, which every read
// includes. With a store that checks schema changes (schema_changes.go)
// the last of its raises (the only one, but for a write of unknown tables
// and named ones) carries the check, with the graph whose dependents it
// raised.
func (p *Plugin) raise(ctx context.Context, w writeSet, pos lsnstore.Position) error {
	w = capKeys(w)
	g := p.deps.Load()
	unknown := w.unknown || (g != nil && g.unknown)
	tables := make([]string, 0, len(w.tables))
	seen := make(map[string]bool, len(w.tables))
	for t := range w.tables {
		if !seen[t] {
			seen[t] = true
			tables = append(tables, t)
		}
		if g == nil {
			continue
		}
		// Dependents of a keyed write's table (lsnstore.KeyedTable) are
		// raised as plain tables: unkeyed. A key name has none of its own.
		for _, d := range g.graph[lsnstore.BaseTable(t)] {
			if d == lsnstore.Everything {
				unknown = true
			} else if !seen[d] {
				seen[d] = true
				tables = append(tables, d)
			}
		}
	}
	sc, checked := p.cfg.Store.(lsnstore.SchemaChanges)
	if unknown && (!checked || len(tables) > 0) {
		if err := p.cfg.Store.Raise(ctx, nil, pos); err != nil {
			return err
		}
	}
	switch {
	case checked && unknown && len(tables) == 0:
		return p.raiseChecked(ctx, sc, nil, w, g, pos)
	case checked:
		return p.raiseChecked(ctx, sc, tables, w, g, pos)
	case len(tables) == 0:
		return nil
	}
	return p.cfg.Store.Raise(ctx, tables, pos)
}

// raiseNow publishes w, committed earlier, at the primary's position now
// (past its commit: a higher position is still correct).
func (p *Plugin) raiseNow(ctx context.Context, w writeSet) error {
	pos, err := p.currentPosition(ctx)
	if err != nil {
		return err
	}
	return p.raise(ctx, w, pos)
}

// retryPending publishes pending writes with the current position, after
// releasing the held writes whose transactions ended.
func (p *Plugin) retryPending(ctx context.Context) {
	if !p.pending.suspect.Load() {
		return
	}
	p.releaseEndedForeign(ctx)
	w, ok := p.pending.take()
	if ok {
		if err := p.raiseNow(ctx, w); err != nil {
			p.pending.add(w)
			return
		}
	}
	p.pending.mu.Lock()
	if p.pending.w.empty() && len(p.pending.held) == 0 {
		p.pending.suspect.Store(false)
	}
	p.pending.mu.Unlock()
}
