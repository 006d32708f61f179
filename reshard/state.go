package reshard

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/freshread/freshread/sharding"
)

// The move's state lives on its target shard, in two tables:
//
//	freshread_reshard_state(move_id, source, target, buckets, nbuckets, phase, slot, start position, applied position, map_version, updated_at)
//	freshread_reshard_copy(move_id, tbl, last_key, rows, done)
//
// On the target because the two things a resume must know exactly commit
// there: a copy chunk's last key commits with the chunk's rows, and a
// catch-up batch's applied position with its rows, in the same
// transaction. The map store (a different database) cannot be written in
// those transactions; it gets the move's phase (MapStore.SaveMove) for the
// processes that follow the map, and it is where the switch's outcome is
// decided (Publish), so a resume reads the map to know whether the switch
// published. Each engine has its own column types (engine's state
// methods); the positions are the feed's, as text ("" for none).

// moveState is a move's row of freshread_reshard_state.
type moveState struct {
	exists     bool
	phase      string
	source     string
	target     string
	buckets    []int
	nbuckets   int
	slot       string
	startPos   string // the feed's start position, "" before it exists
	appliedPos string // the last position the target holds every change up to, "" for none
	version    int64  // the map version the switch published, 0 before
}

// readState reads the move's state (exists false when there is none, or
// no state table yet).
func (m *Mover) readState(ctx context.Context) (moveState, error) {
	st, err := m.eng.readState(ctx, m.dst.DB, m.cfg.Schema, m.mv.ID)
	if err != nil {
		return st, fmt.Errorf("reshard: move %s: read state on %s: %w", m.mv.ID, m.dst.Name, err)
	}
	if !st.exists {
		return moveState{}, nil
	}
	if st.source != m.mv.From || st.target != m.mv.To || !slices.Equal(st.buckets, m.mv.Buckets) {
		return st, fmt.Errorf("%w: move ID %s was used for %s -> %s buckets %s", ErrConfig, m.mv.ID, st.source, st.target, bucketRanges(st.buckets))
	}
	return st, nil
}

// setPhase records the move's phase on the target (in q: a transaction or
// the pool).
func (m *Mover) setPhase(ctx context.Context, q querier, phase string) error {
	if err := m.eng.setPhase(ctx, q, m.cfg.Schema, m.mv.ID, phase); err != nil {
		return fmt.Errorf("reshard: move %s: record phase %s: %w", m.mv.ID, phase, err)
	}
	return nil
}

// report saves the move's shared status in the store; caughtUp is how
// long ago the target held every source change (sharding.NotCaughtUp:
// nothing new about it).
func (m *Mover) report(ctx context.Context, phase string, caughtUp time.Duration) error {
	err := m.cfg.Store.SaveMove(ctx, sharding.MoveStatus{
		ID: m.mv.ID, Buckets: slices.Clone(m.mv.Buckets), From: m.mv.From, To: m.mv.To, Phase: phase,
	}, caughtUp)
	if err != nil {
		return fmt.Errorf("reshard: move %s: save status %s: %w", m.mv.ID, phase, err)
	}
	return nil
}

// scanState reads a move's state row: phase, source, target, buckets (a
// JSON array), nbuckets, slot, the start and applied positions, the map
// version (exists false for no row).
func scanState(row *sql.Row) (moveState, error) {
	var (
		st             moveState
		buckets        string
		start, applied sql.NullString
	)
	err := row.Scan(&st.phase, &st.source, &st.target, &buckets, &st.nbuckets, &st.slot, &start, &applied, &st.version)
	if err == sql.ErrNoRows {
		return moveState{}, nil
	}
	if err != nil {
		return st, err
	}
	st.exists = true
	if err := json.Unmarshal([]byte(buckets), &st.buckets); err != nil {
		return st, fmt.Errorf("state buckets %q: %w", buckets, err)
	}
	st.startPos, st.appliedPos = start.String, applied.String
	return st, nil
}
