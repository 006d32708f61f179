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
//	freshread_reshard_state(move_id, source, target, buckets, nbuckets, phase, slot, start_lsn, applied_lsn, map_version, updated_at)
//	freshread_reshard_copy(move_id, tbl, last_key, rows, done)
//
// On the target because the two things a resume must know exactly commit
// there: a copy chunk's last key commits with the chunk's rows, and a
// catch-up batch's applied position with its rows, in the same
// transaction. The map store (a different database) cannot be written in
// those transactions; it gets the move's phase (MapStore.SaveMove) for the
// processes that follow the map, and it is where the switch's outcome is
// decided (Publish), so a resume reads the map to know whether the switch
// published.

// moveState is a move's row of freshread_reshard_state.
type moveState struct {
	exists     bool
	phase      string
	source     string
	target     string
	buckets    []int
	nbuckets   int
	slot       string
	startLSN   walPos
	appliedLSN walPos
	version    int64 // the map version the switch published, 0 before
}

func (m *Mover) stateTable() string { return quoteIdent(m.cfg.Schema) + ".freshread_reshard_state" }
func (m *Mover) copyTable() string  { return quoteIdent(m.cfg.Schema) + ".freshread_reshard_copy" }

// createStateTables creates the state tables on the target.
func (m *Mover) createStateTables(ctx context.Context) error {
	_, err := m.dst.DB.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+m.stateTable()+` (
  move_id text PRIMARY KEY,
  source text NOT NULL,
  target text NOT NULL,
  buckets int4[] NOT NULL,
  nbuckets int4 NOT NULL,
  phase text NOT NULL,
  slot text NOT NULL,
  start_lsn pg_lsn,
  applied_lsn pg_lsn,
  map_version int8 NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now()
)`)
	if err != nil {
		return err
	}
	_, err = m.dst.DB.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+m.copyTable()+` (
  move_id text NOT NULL,
  tbl text NOT NULL,
  last_key text[],
  rows int8 NOT NULL DEFAULT 0,
  done bool NOT NULL DEFAULT false,
  PRIMARY KEY (move_id, tbl)
)`)
	return err
}

// readState reads the move's state (exists false when there is none, or
// no state table yet).
func (m *Mover) readState(ctx context.Context) (moveState, error) {
	var (
		st             moveState
		buckets        string
		start, applied sql.NullString
		regclass       sql.NullString
	)
	if err := m.dst.DB.QueryRowContext(ctx, `SELECT to_regclass($1)::text`, m.stateTable()).Scan(&regclass); err != nil {
		return st, err
	}
	if !regclass.Valid {
		return st, nil
	}
	err := m.dst.DB.QueryRowContext(ctx, `SELECT phase, source, target, array_to_json(buckets)::text, nbuckets, slot, start_lsn::text, applied_lsn::text, map_version
 FROM `+m.stateTable()+` WHERE move_id = $1`, m.mv.ID).Scan(&st.phase, &st.source, &st.target, &buckets, &st.nbuckets, &st.slot, &start, &applied, &st.version)
	if err == sql.ErrNoRows {
		return moveState{}, nil
	}
	if err != nil {
		return st, fmt.Errorf("reshard: move %s: read state on %s: %w", m.mv.ID, m.dst.Name, err)
	}
	st.exists = true
	if err := json.Unmarshal([]byte(buckets), &st.buckets); err != nil {
		return st, fmt.Errorf("reshard: move %s: state buckets %q: %w", m.mv.ID, buckets, err)
	}
	if st.startLSN, err = scanLSN(start); err != nil {
		return st, err
	}
	if st.appliedLSN, err = scanLSN(applied); err != nil {
		return st, err
	}
	if st.source != m.mv.From || st.target != m.mv.To || !slices.Equal(st.buckets, m.mv.Buckets) {
		return st, fmt.Errorf("%w: move ID %s was used for %s -> %s buckets %s", ErrConfig, m.mv.ID, st.source, st.target, bucketRanges(st.buckets))
	}
	return st, nil
}

// setPhase records the move's phase on the target (in q: a transaction or
// the pool).
func (m *Mover) setPhase(ctx context.Context, q querier, phase string) error {
	if _, err := q.ExecContext(ctx, `UPDATE `+m.stateTable()+` SET phase = $2, updated_at = now() WHERE move_id = $1`, m.mv.ID, phase); err != nil {
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
