package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/freshread/freshread/sharding"
)

// The catch-up applies to the target the changes made on the source since
// the copy began, as the move's feed finds them (pgFeed on PostgreSQL):
// it reads the changed rows as they are now on the source, once their
// transactions are visible there, and on the target upserts the ones in a
// moving bucket and deletes the others (within the moving buckets).
// Whatever the order of the changes, this converges to the source's
// state, so replaying changes after a crash is harmless.

// CatchUpReport is what CatchUp did.
type CatchUpReport struct {
	// Rounds is the number of rounds of catching up.
	Rounds int
	// Changes is the number of decoded changes of the moving tables the
	// rounds applied.
	Changes int64
	// Rows is the number of rows the rounds re-read from the source.
	Rows int64
	// LagBytes is the WAL from the last position the target holds every
	// change up to to the source's position at the end.
	LagBytes int64
	// Lag is how long ago the source was at that position.
	Lag time.Duration
	// Duration is how long CatchUp ran.
	Duration time.Duration
}

func (m *Mover) tableOf(rel relName) int {
	for i, t := range m.tables {
		if t.src.rel == rel {
			return i
		}
	}
	return -1
}

// applyKeys makes the target's rows of keys (in the moving buckets) what
// the source holds now.
func (m *Mover) applyKeys(ctx context.Context, t *movingTable, keys [][]string) error {
	var moving, gone [][]*string
	err := m.eng.withTx(ctx, m.src.DB, func(tx *sql.Tx) error {
		var err error
		moving, gone, err = m.readChanged(ctx, tx, t, keys)
		return err
	})
	if err != nil {
		return fmt.Errorf("read from %s: %w", m.src.Name, err)
	}
	err = m.eng.withTx(ctx, m.dst.DB, func(tx *sql.Tx) error { return m.writeChanged(ctx, tx, t, moving, gone) })
	if err != nil {
		return fmt.Errorf("write to %s: %w", m.dst.Name, err)
	}
	m.recordWrite(ctx, t.cfg.Name)
	return nil
}

// readChanged reads, in q on the source, the rows of keys as they are
// now: moving, those in a moving bucket; gone, the keys whose row is gone
// from the source or left the moving buckets.
func (m *Mover) readChanged(ctx context.Context, q querier, t *movingTable, keys [][]string) (moving, gone [][]*string, err error) {
	current, inBucket, err := t.ops.readByKey(ctx, q, keys, m.mv.Buckets)
	if err != nil {
		return nil, nil, err
	}
	kept := map[string]bool{}
	for i, r := range current {
		if !inBucket[i] {
			continue
		}
		moving = append(moving, r)
		key := make([]string, len(t.pkIdx))
		for k, j := range t.pkIdx {
			key[k] = deref(r[j])
		}
		kept[strings.Join(key, "\x00")] = true
	}
	for _, k := range keys {
		if !kept[strings.Join(k, "\x00")] {
			row := make([]*string, len(k))
			for i := range k {
				row[i] = &k[i]
			}
			gone = append(gone, row)
		}
	}
	return moving, gone, nil
}

// writeChanged makes the target's rows what readChanged found, in tx:
// the gone keys deleted (within the moving buckets), the moving rows
// written.
func (m *Mover) writeChanged(ctx context.Context, tx *sql.Tx, t *movingTable, moving, gone [][]*string) error {
	if len(gone) > 0 {
		if err := t.ops.deleteKeys(ctx, tx, false, gone, m.mv.Buckets); err != nil {
			return err
		}
	}
	if len(moving) > 0 {
		return t.ops.upsert(ctx, tx, m.dst.Name, moving, m.mv.Buckets)
	}
	return nil
}

// roundResult is one catch-up round.
type roundResult struct {
	at      time.Time // the target holds every change committed before it
	reached uint64    // the feed's position at the end of the round (pgFeed: WAL)
	changes int64
	rows    int64
	took    time.Duration
}

// CatchUp applies the changes made on the source since the copy began,
// round after round, until a round (from reading the source's position to
// having applied every change before it) takes less than
// Config.CatchUpLag. After every round the move's status records that the
// target is caught up (MapStore.SaveMove with caughtUp), for the reads that
// accept a lag (sharding.AllowLag). Run it after Copy; it may run again at
// any time before the switch.
func (m *Mover) CatchUp(ctx context.Context) (CatchUpReport, error) {
	done, err := m.begin(ctx)
	if err != nil {
		return CatchUpReport{}, err
	}
	defer done()
	return m.catchUp(ctx, false)
}

// Follow keeps the target caught up until ctx ends (migration stage one:
// reads that accept a lag use the target meanwhile): a round every
// interval, each reported to the store. It returns nil when ctx ends.
func (m *Mover) Follow(ctx context.Context, interval time.Duration) error {
	done, err := m.begin(ctx)
	if err != nil {
		return err
	}
	defer done()
	for {
		if _, err := m.catchUp(ctx, true); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

func (m *Mover) catchUp(ctx context.Context, once bool) (CatchUpReport, error) {
	var rep CatchUpReport
	st, err := m.readState(ctx)
	if err != nil {
		return rep, err
	}
	if !st.exists || st.phase != sharding.MoveCatchingUp {
		return rep, fmt.Errorf("%w: move %s is %q, catching up follows the copy", ErrPhase, m.mv.ID, st.phase)
	}
	if err := m.feed.resume(ctx); err != nil {
		return rep, err
	}
	start := time.Now()
	for {
		r, err := m.feed.round(ctx)
		rep.Rounds++
		rep.Changes += r.changes
		rep.Rows += r.rows
		if err != nil {
			return rep, err
		}
		if rep.LagBytes, err = m.feed.lagBytes(ctx, r); err != nil {
			return rep, err
		}
		rep.Lag = time.Since(r.at)
		rep.Duration = time.Since(start)
		if err := m.report(ctx, sharding.MoveCatchingUp, time.Since(r.at)); err != nil {
			return rep, err
		}
		if m.cfg.Progress != nil {
			m.cfg.Progress(Progress{Move: m.mv.ID, Phase: sharding.MoveCatchingUp, Changes: rep.Changes, Rows: rep.Rows, LagBytes: rep.LagBytes, Lag: rep.Lag})
		}
		if once || r.took < m.cfg.CatchUpLag {
			m.cfg.Logger.InfoContext(ctx, "reshard: caught up", "move", m.mv.ID, "rounds", rep.Rounds, "changes", rep.Changes, "lag_bytes", rep.LagBytes, "lag", rep.Lag)
			return rep, nil
		}
	}
}
