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

// publishTimeout bounds reading the position after a commit and publishing
// it; the store bounds its own calls within it.
const publishTimeout = 5 * time.Second

// publish records w's position after its commit: the caller's session
// first (in process, cannot fail), then the store.
func (p *Plugin) publish(ctx context.Context, w writeSet) {
	ctx, cancel := publishContext(ctx)
	defer cancel()
	pos, err := p.currentPosition(ctx)
	p.publishAt(ctx, w, pos, err)
}

// publishContext is the context of a publication: not cancelled with the
// caller's (the write happened), bounded by publishTimeout.
func publishContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
}

// publishAt publishes w at pos, read after its commit (err: it could not
// be read), in a context from publishContext.
func (p *Plugin) publishAt(ctx context.Context, w writeSet, pos lsnstore.Position, err error) {
	if s := SessionFrom(ctx); s != nil {
		s.wrote(time.Now())
	}
	if err != nil {
		p.cfg.Logger.WarnContext(ctx, "freshread: cannot read the primary's position after commit; reads go to the primary until it is published", "err", err)
		p.unpublished(ctx, w)
		return
	}
	if s := SessionFrom(ctx); s != nil {
		s.raise(p.cluster, pos)
	}
	if err := p.raise(ctx, w, pos); err != nil {
		p.cfg.Logger.WarnContext(ctx, "freshread: cannot publish write position; this process reads from the primary until it is", "err", err)
		p.unpublished(ctx, w)
	}
}

// unpublished keeps w, committed (or perhaps committed) but missing from
// the store, pending in this process, and tells the other processes
// sharing the store (lsnstore.Invalidator): until their pollers have
// verified the store again and taken the primary's position, past the
// write, as their floor, they read from the primary. It runs before the
// commit returns, so no read that begins after the write was acknowledged
// can miss it. A store that cannot be told (down, partitioned) leaves the
// other processes' reads to their own view of it: docs/design/reliability.md.
func (p *Plugin) unpublished(ctx context.Context, w writeSet) {
	p.pending.add(w)
	inv, ok := p.cfg.Store.(lsnstore.Invalidator)
	if !ok {
		return
	}
	// Its own context: the caller's may be cancelled, or spent on the
	// position read that failed (a primary that hung after COMMIT), and
	// Redis may answer.
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if err := inv.Invalidate(ictx); err != nil {
		p.cfg.Logger.WarnContext(ctx, "freshread: cannot tell the other processes of a write missing from the position store; they may read it stale until it is published", "err", err)
	}
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
	out := writeSet{unknown: w.unknown, tables: make(map[string]struct{}, len(w.tables)-n)}
	for t := range w.tables {
		base, _ := lsnstore.KeyedBase(t)
		out.tables[base] = struct{}{}
	}
	return out
}

// raise publishes pos for w's tables and their dependents. A dependent
// "*" (anything) raises the unknown-tables position, which every read
// includes.
func (p *Plugin) raise(ctx context.Context, w writeSet, pos lsnstore.Position) error {
	w = capKeys(w)
	unknown := w.unknown || p.dependentsUnknown()
	tables := make([]string, 0, len(w.tables))
	seen := make(map[string]bool, len(w.tables))
	for t := range w.tables {
		if !seen[t] {
			seen[t] = true
			tables = append(tables, t)
		}
		// Dependents of a keyed write's table (lsnstore.KeyedTable) are
		// raised as plain tables: unkeyed. A key name has none of its own.
		for _, d := range p.dependentsOf(lsnstore.BaseTable(t)) {
			if d == lsnstore.Everything {
				unknown = true
			} else if !seen[d] {
				seen[d] = true
				tables = append(tables, d)
			}
		}
	}
	if unknown {
		if err := p.cfg.Store.Raise(ctx, nil, pos); err != nil {
			return err
		}
	}
	if len(tables) == 0 {
		return nil
	}
	return p.cfg.Store.Raise(ctx, tables, pos)
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
		pos, err := p.currentPosition(ctx)
		if err == nil {
			err = p.raise(ctx, w, pos)
		}
		if err != nil {
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
