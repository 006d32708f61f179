package reshard

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/freshread/freshread/sharding"
)

// Mover moves one set of buckets from one shard to another. Its methods
// are the phases; each can be interrupted (a cancelled context, a crash)
// and run again, which resumes where the move's state says. Run does
// Prepare, Copy, CatchUp and Switch; Cleanup is a separate step. A Mover's
// methods run one at a time; only one Mover in any process may work on a
// move at a time (an advisory lock on the target), others get ErrBusy.
type Mover struct {
	cfg      Config
	mv       Move
	src, dst Shard
	slot     string
	eng      engine
	feed     feed

	mu       sync.Mutex // one method at a time
	nb       int
	tables   []*movingTable
	lockConn *sql.Conn
	locks    int

	// hook, set by tests, is called at named points of the phases; an
	// error it returns fails the phase there (errCrash: as if the process
	// died, without the rollback a failure runs).
	hook func(point string) error
}

// New returns a Mover for mv. Nothing is read or written until a phase
// runs.
func New(cfg Config, mv Move) (*Mover, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	mv, err := mv.normalize(cfg)
	if err != nil {
		return nil, err
	}
	src, _ := cfg.shard(mv.From)
	dst, _ := cfg.shard(mv.To)
	m := &Mover{cfg: cfg, mv: mv, src: src, dst: dst, slot: slotName(mv.ID), eng: cfg.eng}
	m.feed = m.eng.newFeed(m)
	return m, nil
}

// Move returns the move, with its ID and sorted buckets.
func (m *Mover) Move() Move { return m.mv }

// Slot is the name of the move's replication slot on the source.
func (m *Mover) Slot() string { return m.slot }

// lockReleaseTimeout bounds releasing the move's lock.
const lockReleaseTimeout = 5 * time.Second

// errCrash, returned by a test hook, makes the phase stop as a crashed
// process would: no rollback.
var errCrash = errors.New("reshard: simulated crash")

func (m *Mover) at(point string) error {
	if m.hook == nil {
		return nil
	}
	return m.hook(point)
}

// current reads the map: the store's, or Config.InitialMap when the store
// has none (version 0).
func current(ctx context.Context, cfg Config) (sharding.BucketMap, error) {
	bm, _, found, err := cfg.Store.Load(ctx)
	if err != nil {
		return bm, fmt.Errorf("reshard: load the bucket map: %w", err)
	}
	if !found {
		if cfg.InitialMap == nil {
			return bm, fmt.Errorf("%w: the store holds no map and Config.InitialMap is nil", ErrConfig)
		}
		bm = *cfg.InitialMap
		bm.Version = 0
	}
	if len(bm.Owners) == 0 || len(bm.Owners) > sharding.MaxBuckets {
		return bm, fmt.Errorf("%w: the bucket map has %d buckets", ErrConfig, len(bm.Owners))
	}
	return bm, nil
}

// published loads the current map and reports, as ownedBy, whether it
// already gives the move's buckets to the target.
func (m *Mover) published(ctx context.Context) (bool, error) {
	bm, err := current(ctx, m.cfg)
	if err != nil {
		return false, err
	}
	return m.ownedBy(bm)
}

// ownedBy reports who owns the move's buckets in bm: the source
// (published false) or the target (published true); anything else is
// ErrNotOwner. Hot users of the moving buckets must live elsewhere: their
// rows are on their own shard, which the copy and the guard do not know.
func (m *Mover) ownedBy(bm sharding.BucketMap) (published bool, err error) {
	var from, to []int
	for _, b := range m.mv.Buckets {
		if b >= len(bm.Owners) {
			return false, fmt.Errorf("%w: bucket %d, the map has %d", ErrConfig, b, len(bm.Owners))
		}
		switch bm.Owners[b] {
		case m.mv.From:
			from = append(from, b)
		case m.mv.To:
			to = append(to, b)
		default:
			return false, fmt.Errorf("%w: bucket %d is owned by %s (map version %d), not %s", ErrNotOwner, b, bm.Owners[b], bm.Version, m.mv.From)
		}
	}
	if len(from) > 0 && len(to) > 0 {
		return false, fmt.Errorf("%w: buckets %s are on %s and %s on %s (map version %d)", ErrNotOwner, bucketRanges(from), m.mv.From, bucketRanges(to), m.mv.To, bm.Version)
	}
	for u, s := range bm.HotUsers {
		b := int(uint64(u) % uint64(len(bm.Owners)))
		if (s == m.mv.From || s == m.mv.To) && slices.Contains(m.mv.Buckets, b) {
			return false, fmt.Errorf("%w: hot user %d of bucket %d lives on %s; move it first", ErrNotOwner, u, b, s)
		}
	}
	return len(to) > 0, nil
}

// init reads the map's number of buckets and the tables' catalogs on the
// source and the target, once.
func (m *Mover) init(ctx context.Context) error {
	if m.tables != nil {
		return nil
	}
	bm, err := current(ctx, m.cfg)
	if err != nil {
		return err
	}
	nb := len(bm.Owners)
	var tables []*movingTable
	for _, t := range m.cfg.Tables {
		src, err := m.eng.describe(ctx, m.src.DB, m.src.Name, t)
		if err != nil {
			return err
		}
		dst, err := m.eng.describe(ctx, m.dst.DB, m.dst.Name, t)
		if err != nil {
			return err
		}
		mt, err := pair(m.eng, t, src, dst, nb)
		if err != nil {
			return err
		}
		tables = append(tables, mt)
	}
	for _, sh := range []Shard{m.src, m.dst} {
		warning, err := m.eng.checkShard(ctx, sh)
		if err != nil {
			return fmt.Errorf("reshard: shard %s: %w", sh.Name, err)
		}
		if warning != "" {
			m.cfg.Logger.WarnContext(ctx, warning, "shard", sh.Name)
		}
	}
	m.nb, m.tables = nb, tables
	return nil
}

// lock takes the move's advisory lock on the target (nested calls count).
func (m *Mover) lock(ctx context.Context) error {
	if m.locks > 0 {
		m.locks++
		return nil
	}
	conn, err := m.dst.DB.Conn(ctx)
	if err != nil {
		return fmt.Errorf("reshard: move %s: connect to %s: %w", m.mv.ID, m.dst.Name, err)
	}
	ok, err := m.eng.tryLock(ctx, conn, m.mv.ID)
	if err != nil {
		conn.Close()
		return fmt.Errorf("reshard: move %s: lock: %w", m.mv.ID, err)
	}
	if !ok {
		conn.Close()
		return fmt.Errorf("%w: move %s is locked on %s by another mover", ErrBusy, m.mv.ID, m.dst.Name)
	}
	m.lockConn, m.locks = conn, 1
	return nil
}

func (m *Mover) unlock() {
	m.locks--
	if m.locks > 0 || m.lockConn == nil {
		return
	}
	// Closing the connection would keep it in the pool with the lock held:
	// unlock first, and if that fails, discard the connection.
	ctx, cancel := context.WithTimeout(context.Background(), lockReleaseTimeout)
	defer cancel()
	if err := m.eng.unlock(ctx, m.lockConn, m.mv.ID); err != nil {
		_ = m.lockConn.Raw(func(any) error { return driver.ErrBadConn }) // the pool discards it
	}
	m.lockConn.Close()
	m.lockConn = nil
}

// begin starts a method: one at a time, with the move's lock.
func (m *Mover) begin(ctx context.Context) (func(), error) {
	m.mu.Lock()
	if err := m.lock(ctx); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	if err := m.init(ctx); err != nil {
		m.unlock()
		m.mu.Unlock()
		return nil, err
	}
	return func() {
		m.feed.close()
		m.unlock()
		m.mu.Unlock()
	}, nil
}

// Status returns the move's phase as its state on the target says
// ("" when it was never prepared).
func (m *Mover) Status(ctx context.Context) (string, error) {
	st, err := m.readState(ctx)
	if err != nil || !st.exists {
		return "", err
	}
	return st.phase, nil
}

// Prepare installs the guard on every shard, records the move on the
// target, fences the moving buckets there as incoming and creates the
// replication slot on the source. It is idempotent: a prepared move is
// left as it is. A move rolled back earlier starts again from scratch.
func (m *Mover) Prepare(ctx context.Context) error {
	done, err := m.begin(ctx)
	if err != nil {
		return err
	}
	defer done()
	return m.prepare(ctx)
}

func (m *Mover) prepare(ctx context.Context) error {
	published, err := m.published(ctx)
	if err != nil {
		return err
	}
	if err := m.eng.createStateTables(ctx, m.dst.DB, m.cfg.Schema); err != nil {
		return fmt.Errorf("reshard: move %s: state tables on %s: %w", m.mv.ID, m.dst.Name, err)
	}
	st, err := m.readState(ctx)
	if err != nil {
		return err
	}
	if published {
		if !st.exists {
			return fmt.Errorf("%w: buckets %s are owned by %s already", ErrNotOwner, bucketRanges(m.mv.Buckets), m.mv.To)
		}
		return nil // switched: nothing to prepare
	}
	if st.exists && st.phase != sharding.MovePlanned && st.phase != sharding.MoveRolledBack {
		return nil // prepared earlier
	}
	if err := m.installGuards(ctx); err != nil {
		return err
	}
	// The state, then the fence on the target, then the feed: the copy may
	// only start once the feed exists (it finds every change committed
	// after its start), and a crash in between leaves a state from which
	// Prepare runs again.
	tables := make([]string, len(m.tables))
	for i, t := range m.tables {
		tables[i] = t.cfg.Name
	}
	err = m.eng.withTx(ctx, m.dst.DB, func(tx *sql.Tx) error {
		if err := m.eng.resetState(ctx, tx, m.cfg.Schema, m.mv, m.nb, sharding.MovePlanned, m.slot, tables); err != nil {
			return err
		}
		return m.eng.fence(ctx, tx, m.cfg.Schema, m.mv.Buckets, FenceIncoming, m.mv.ID)
	})
	if err != nil {
		return fmt.Errorf("reshard: move %s: prepare on %s: %w", m.mv.ID, m.dst.Name, err)
	}
	// The target does not own the buckets, so whatever rows it holds in
	// them are leftovers (of an earlier move away whose cleanup did not
	// run, of a rollback that stopped): the copy would not remove those
	// deleted on the source since. The fence keeps the application out.
	for _, t := range slices.Backward(m.tables) {
		n, err := m.deleteMoving(ctx, m.dst, t, false, nil)
		if err != nil {
			return fmt.Errorf("reshard: move %s: delete leftover rows of %s on %s: %w", m.mv.ID, t.cfg.Name, m.dst.Name, err)
		}
		if n > 0 {
			m.cfg.Logger.InfoContext(ctx, "reshard: deleted leftover rows of the moving buckets on the target", "move", m.mv.ID, "table", t.cfg.Name, "rows", n)
		}
	}
	// The feed must exist before anything is copied: it finds every
	// change committed after its start. A rolled-back move's feed may be
	// older than the copy: harmless (more changes to replay), but it
	// starts afresh.
	start, err := m.feed.create(ctx, st.exists && st.phase == sharding.MoveRolledBack)
	if err != nil {
		return err
	}
	if err := m.eng.setStart(ctx, m.dst.DB, m.cfg.Schema, m.mv.ID, sharding.MoveCopying, start); err != nil {
		return fmt.Errorf("reshard: move %s: record the feed's start: %w", m.mv.ID, err)
	}
	m.cfg.Logger.InfoContext(ctx, "reshard: prepared", "move", m.mv.ID, "engine", m.eng.name(), "start", start)
	return m.report(ctx, sharding.MoveCopying, sharding.NotCaughtUp)
}

// installGuards installs the fence table and the guard triggers on every
// shard.
func (m *Mover) installGuards(ctx context.Context) error {
	for _, s := range m.cfg.Shards {
		var sides []*tableSide
		for _, t := range m.cfg.Tables {
			side, err := m.eng.describe(ctx, s.DB, s.Name, t)
			if err != nil {
				return err
			}
			sides = append(sides, side)
		}
		if err := m.eng.installGuard(ctx, s.DB, m.cfg.Schema, sides, m.nb); err != nil {
			return fmt.Errorf("reshard: install the guard on %s: %w", s.Name, err)
		}
	}
	return nil
}
