package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/freshread/freshread/sharding"
)

// deleteMoving deletes the moving buckets' rows of t on the source (the
// cleanup) or the target (a rollback, a TRUNCATE applied) in keyset
// chunks, each its own mover transaction, and returns how many.
func (m *Mover) deleteMoving(ctx context.Context, sh Shard, t *movingTable, onSource bool, progress func(int64)) (int64, error) {
	var (
		last  []*string
		total int64
	)
	for {
		var n int
		err := m.eng.withTx(ctx, sh.DB, func(tx *sql.Tx) error {
			keys, err := t.ops.keys(ctx, tx, onSource, m.mv.Buckets, last, m.cfg.ChunkRows)
			if err != nil || len(keys) == 0 {
				return err
			}
			n = len(keys)
			last = keys[len(keys)-1]
			return t.ops.deleteKeys(ctx, tx, onSource, keys, m.mv.Buckets)
		})
		if err != nil {
			return total, err
		}
		if n == 0 {
			return total, nil
		}
		total += int64(n)
		if !onSource {
			m.recordWrite(ctx, t.cfg.Name)
		}
		if progress != nil {
			progress(total)
		}
		if n < m.cfg.ChunkRows {
			return total, nil
		}
	}
}

// CleanupReport is what Cleanup deleted from the source.
type CleanupReport struct {
	// Rows is the number of rows deleted, over every table.
	Rows int64
	// Tables is the number of rows deleted per table.
	Tables map[string]int64
	// Duration is how long Cleanup ran.
	Duration time.Duration
}

// Cleanup deletes the moved buckets' rows from the source in chunks (as
// the mover: the source's fence, kept for good, refuses everyone else)
// and drops the move's slot. It runs after the switch, is resumable (run
// it again), and a finished move returns at once.
func (m *Mover) Cleanup(ctx context.Context) (CleanupReport, error) {
	done, err := m.begin(ctx)
	if err != nil {
		return CleanupReport{}, err
	}
	defer done()
	return m.cleanup(ctx)
}

func (m *Mover) cleanup(ctx context.Context) (CleanupReport, error) {
	rep := CleanupReport{Tables: map[string]int64{}}
	st, err := m.readState(ctx)
	if err != nil {
		return rep, err
	}
	switch {
	case st.exists && st.phase == sharding.MoveDone:
		return rep, nil
	case !st.exists || (st.phase != sharding.MoveSwitched && st.phase != sharding.MoveCleaning):
		return rep, fmt.Errorf("%w: move %s is %q, the cleanup follows the switch", ErrPhase, m.mv.ID, st.phase)
	}
	start := time.Now()
	if err := m.setPhase(ctx, m.dst.DB, sharding.MoveCleaning); err != nil {
		return rep, err
	}
	if err := m.report(ctx, sharding.MoveCleaning, sharding.NotCaughtUp); err != nil {
		return rep, err
	}
	if err := m.feed.drop(ctx); err != nil {
		return rep, err
	}
	for _, t := range slices.Backward(m.tables) { // children first, for foreign keys
		n, err := m.deleteMoving(ctx, m.src, t, true, func(n int64) {
			if m.cfg.Progress != nil {
				el := time.Since(start).Seconds()
				m.cfg.Progress(Progress{Move: m.mv.ID, Phase: sharding.MoveCleaning, Table: t.cfg.Name, Rows: rep.Rows + n, RowsPerSecond: float64(rep.Rows+n) / el})
			}
		})
		rep.Rows += n
		rep.Tables[t.cfg.Name] = n
		if err != nil {
			return rep, fmt.Errorf("reshard: move %s: clean %s on %s: %w", m.mv.ID, t.cfg.Name, m.src.Name, err)
		}
		if err := m.at("cleanup:table"); err != nil {
			return rep, err
		}
	}
	if err := m.setPhase(ctx, m.dst.DB, sharding.MoveDone); err != nil {
		return rep, err
	}
	rep.Duration = time.Since(start)
	m.cfg.Logger.InfoContext(ctx, "reshard: cleaned up", "move", m.mv.ID, "rows", rep.Rows)
	return rep, m.report(ctx, sharding.MoveDone, sharding.NotCaughtUp)
}

// Rollback undoes a move that has not published its map: drops the slot,
// deletes the copied rows from the target, and removes the move's fences
// (the target's incoming ones, and the source's if a switch stopped
// midway). After the publish it fails with ErrPhase: the move can only go
// forward (Switch). A rolled-back move can be prepared again.
func (m *Mover) Rollback(ctx context.Context) error {
	done, err := m.begin(ctx)
	if err != nil {
		return err
	}
	defer done()
	return m.rollback(ctx)
}

func (m *Mover) rollback(ctx context.Context) error {
	published, err := m.published(ctx)
	if err != nil {
		return err
	}
	st, err := m.readState(ctx)
	if err != nil {
		return err
	}
	if published || (st.exists && (st.phase == sharding.MoveSwitched || st.phase == sharding.MoveCleaning || st.phase == sharding.MoveDone)) {
		return fmt.Errorf("%w: move %s published map version with %s owning its buckets: it can only go forward", ErrPhase, m.mv.ID, m.mv.To)
	}
	if err := m.feed.drop(ctx); err != nil {
		return err
	}
	if st.exists {
		if err := m.setPhase(ctx, m.dst.DB, sharding.MoveRolledBack); err != nil {
			return err
		}
	}
	// Unfence the source first: writes go on there. The target stays
	// fenced while its copies are deleted.
	if err := m.unfenceAll(ctx, m.src, FenceMoved); err != nil {
		return err
	}
	var rows int64
	for _, t := range slices.Backward(m.tables) {
		n, err := m.deleteMoving(ctx, m.dst, t, false, nil)
		rows += n
		if err != nil {
			return fmt.Errorf("reshard: move %s: delete the copies of %s on %s: %w", m.mv.ID, t.cfg.Name, m.dst.Name, err)
		}
	}
	if err := m.unfenceAll(ctx, m.dst, FenceIncoming); err != nil {
		return err
	}
	m.cfg.Logger.InfoContext(ctx, "reshard: rolled back", "move", m.mv.ID, "rows_deleted", rows)
	return m.report(ctx, sharding.MoveRolledBack, sharding.NotCaughtUp)
}

// unfenceAll removes the move's fences of state on a shard (no fence table
// yet: nothing to do).
func (m *Mover) unfenceAll(ctx context.Context, sh Shard, state string) error {
	ok, err := m.eng.hasFenceTable(ctx, sh.DB, m.cfg.Schema)
	if err != nil || !ok {
		return err
	}
	if err := m.eng.unfence(ctx, sh.DB, m.cfg.Schema, m.mv.Buckets, state, m.mv.ID); err != nil {
		return fmt.Errorf("reshard: move %s: unfence %s on %s: %w", m.mv.ID, state, sh.Name, err)
	}
	return nil
}
