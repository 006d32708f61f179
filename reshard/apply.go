package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/freshread/freshread/sharding"
)

// The catch-up reads the slot's changes (pg_logical_slot_peek_changes),
// keeps the primary keys of the moving tables' changed rows, waits until
// the source shows their transactions committed (visible.go), reads those
// rows as they are now on the source, and on the target upserts the ones
// in a moving bucket and deletes the others (within the moving buckets).
// Whatever the order of the changes, this converges to the source's state;
// replaying a batch is harmless, so the slot is advanced
// (pg_replication_slot_advance) only after the target committed, and a
// crash in between replays the batch.

// CatchUpReport is what CatchUp did.
type CatchUpReport struct {
	// Rounds of catching up, the decoded changes of the moving tables they
	// applied, and the rows they re-read from the source.
	Rounds  int
	Changes int64
	Rows    int64
	// LagBytes is the WAL from the last position the target holds every
	// change up to to the source's position at the end; Lag how long ago
	// the source was at that position.
	LagBytes int64
	Lag      time.Duration
	Duration time.Duration
}

// batch is the keys of one peek's changes.
type batch struct {
	keys      []map[string][]string // per table: joined key -> key values
	truncated []bool
	changes   int64
	end       walPos // the slot may advance to it once the batch is applied
	// xids are the batch's transactions that changed a moving table: their
	// rows are re-read once the source shows them committed.
	xids []uint32
}

// parseBatch keeps the changed keys of the moving tables.
func (m *Mover) parseBatch(rows []decodedRow) (*batch, error) {
	b := &batch{keys: make([]map[string][]string, len(m.tables)), truncated: make([]bool, len(m.tables))}
	touched := false // the current transaction changed a moving table
	for _, r := range rows {
		c, err := parseChange(r.data)
		if err != nil {
			return nil, err
		}
		b.end = r.lsn
		if c.kind == changeCommit {
			if touched {
				if c.xid == 0 {
					return nil, errDecode(r.data, "no transaction id")
				}
				b.xids = append(b.xids, c.xid)
			}
			touched = false
		}
		if c.kind == changeOther && strings.HasPrefix(r.data, "message:") {
			// A non-transactional message's position is its start: confirm
			// past it, or it comes back.
			b.end = r.lsn + 1
		}
		for _, rel := range c.tables {
			ti := m.tableOf(rel)
			if ti < 0 {
				continue
			}
			t := m.tables[ti]
			b.changes++
			touched = true
			add := func(fields []field, what string) error {
				vals, ok := keyOf(fields, pkNames(t))
				if !ok {
					return errDecode(r.data, fmt.Sprintf("no primary key (%s) in the %s", strings.Join(pkNames(t), ", "), what))
				}
				if b.keys[ti] == nil {
					b.keys[ti] = map[string][]string{}
				}
				b.keys[ti][strings.Join(vals, "\x00")] = vals
				return nil
			}
			switch c.kind {
			case changeInsert:
				err = add(c.newTuple, "new row")
			case changeUpdate:
				if c.oldKey != nil {
					if err = add(c.oldKey, "old key"); err != nil {
						break
					}
				}
				err = add(c.newTuple, "new row")
			case changeDelete:
				err = add(c.oldKey, "old key")
			case changeTruncate:
				b.truncated[ti] = true
			}
			if err != nil {
				return nil, err
			}
		}
	}
	return b, nil
}

func (m *Mover) tableOf(rel relName) int {
	for i, t := range m.tables {
		if t.src.rel == rel {
			return i
		}
	}
	return -1
}

// apply applies a batch to the target and returns the rows re-read.
func (m *Mover) apply(ctx context.Context, b *batch) (int64, error) {
	var rows int64
	if err := m.awaitDecoded(ctx, b.xids); err != nil {
		return rows, err
	}
	for i, t := range slices.Backward(m.tables) {
		if b.truncated[i] {
			if _, err := m.deleteMoving(ctx, m.dst, t, false, nil); err != nil {
				return rows, fmt.Errorf("reshard: move %s: apply a TRUNCATE of %s: %w", m.mv.ID, t.cfg.Name, err)
			}
		}
	}
	for i, t := range m.tables {
		var keys [][]string
		for _, k := range b.keys[i] {
			keys = append(keys, k)
		}
		for len(keys) > 0 {
			n := min(len(keys), m.cfg.ChunkRows)
			if err := m.applyKeys(ctx, t, keys[:n]); err != nil {
				return rows, fmt.Errorf("reshard: move %s: apply changes of %s: %w", m.mv.ID, t.cfg.Name, err)
			}
			rows += int64(n)
			keys = keys[n:]
		}
	}
	if _, err := m.dst.DB.ExecContext(ctx, `UPDATE `+m.stateTable()+` SET applied_lsn = $2::pg_lsn, updated_at = now() WHERE move_id = $1`, m.mv.ID, b.end.String()); err != nil {
		return rows, fmt.Errorf("reshard: move %s: record the applied position: %w", m.mv.ID, err)
	}
	return rows, nil
}

// applyKeys makes the target's rows of keys (in the moving buckets) what
// the source holds now.
func (m *Mover) applyKeys(ctx context.Context, t *movingTable, keys [][]string) error {
	arrays := keyArrays(keys, len(t.pkIdx))
	var current [][]*string
	err := withTx(ctx, m.src.DB, func(tx *sql.Tx) error {
		var err error
		current, err = textRows(ctx, tx, len(t.cols)+1, t.sql.readByKey, append(arrays, int32s(m.mv.Buckets))...)
		return err
	})
	if err != nil {
		return fmt.Errorf("read from %s: %w", m.src.Name, err)
	}
	var moving [][]*string
	kept := map[string]bool{}
	for _, r := range current {
		if deref(r[len(t.cols)]) != "true" {
			continue
		}
		moving = append(moving, r[:len(t.cols)])
		key := make([]string, len(t.pkIdx))
		for i, j := range t.pkIdx {
			key[i] = deref(r[j])
		}
		kept[strings.Join(key, "\x00")] = true
	}
	// The keys whose row is gone from the source or left the moving
	// buckets are deleted from the target; the others are written as the
	// source has them.
	var gone [][]string
	for _, k := range keys {
		if !kept[strings.Join(k, "\x00")] {
			gone = append(gone, k)
		}
	}
	err = withTx(ctx, m.dst.DB, func(tx *sql.Tx) error {
		if len(gone) > 0 {
			if _, err := tx.ExecContext(ctx, t.sql.deleteKeys, append(keyArrays(gone, len(t.pkIdx)), int32s(m.mv.Buckets))...); err != nil {
				return err
			}
		}
		if len(moving) > 0 {
			return m.upsert(ctx, tx, t, moving)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write to %s: %w", m.dst.Name, err)
	}
	m.recordWrite(ctx, t.cfg.Name)
	return nil
}

// keyArrays turns keys into one text[] parameter per key column.
func keyArrays(keys [][]string, n int) []any {
	arrays := make([]any, n)
	for c := range arrays {
		col := make([]*string, len(keys))
		for i, k := range keys {
			v := k[c]
			col[i] = &v
		}
		arrays[c] = col
	}
	return arrays
}

// flushBarrier returns the source's WAL insert position once everything
// before it is flushed, hence decodable: the position is read in a
// transaction that takes an xid and commits with synchronous_commit on,
// which flushes the WAL up to its commit record.
func (m *Mover) flushBarrier(ctx context.Context) (walPos, error) {
	var l string
	err := withTx(ctx, m.src.DB, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SELECT pg_current_wal_insert_lsn()::text FROM (SELECT txid_current()) AS x`).Scan(&l)
	})
	if err != nil {
		return 0, fmt.Errorf("reshard: move %s: read the position of %s: %w", m.mv.ID, m.src.Name, err)
	}
	return parseLSN(l)
}

// applyUpTo applies every change the slot holds that committed before upto
// and returns the changes and rows applied; advance: confirm them to the
// slot at the end too.
func (m *Mover) applyUpTo(ctx context.Context, upto walPos, advance bool) (changes, rows int64, err error) {
	for {
		decoded, err := peek(ctx, m.src.DB, m.slot, upto, m.cfg.ApplyChanges)
		if err != nil {
			return changes, rows, fmt.Errorf("reshard: move %s: read the slot on %s: %w", m.mv.ID, m.src.Name, err)
		}
		if len(decoded) == 0 {
			return changes, rows, nil
		}
		b, err := m.parseBatch(decoded)
		if err != nil {
			return changes, rows, err
		}
		n, err := m.apply(ctx, b)
		rows += n
		if err != nil {
			return changes, rows, err
		}
		changes += b.changes
		if err := m.at("apply:committed"); err != nil {
			return changes, rows, err
		}
		// A batch smaller than asked for reached upto (the flush position is
		// past it): the round is over. The slot then advances only if
		// advance says so: every pass over the slot decodes the WAL from
		// its restart point, and the switch drops the slot anyway (a
		// rolled-back switch replays from the position recorded on the
		// target).
		last := len(decoded) < m.cfg.ApplyChanges || b.end >= upto
		if !last || advance {
			if err := advanceSlot(ctx, m.src.DB, m.slot, b.end); err != nil {
				return changes, rows, fmt.Errorf("reshard: move %s: advance the slot: %w", m.mv.ID, err)
			}
		}
		if last {
			return changes, rows, nil
		}
	}
}

// roundResult is one catch-up round.
type roundResult struct {
	at      time.Time // the target holds every change committed before it
	reached walPos
	changes int64
	rows    int64
	took    time.Duration
}

// round applies every change committed before now.
func (m *Mover) round(ctx context.Context) (roundResult, error) {
	r := roundResult{at: time.Now()}
	target, err := m.flushBarrier(ctx)
	if err != nil {
		return r, err
	}
	r.reached = target
	r.changes, r.rows, err = m.applyUpTo(ctx, target, true)
	r.took = time.Since(r.at)
	return r, err
}

// resumeSlot advances the slot to the position the target recorded last
// (a crash between the target's commit and the slot's advance).
func (m *Mover) resumeSlot(ctx context.Context) error {
	if err := m.checkSlot(ctx); err != nil {
		return err
	}
	st, err := m.readState(ctx)
	if err != nil {
		return err
	}
	if st.appliedLSN != 0 {
		if err := advanceSlot(ctx, m.src.DB, m.slot, st.appliedLSN); err != nil {
			return fmt.Errorf("reshard: move %s: advance the slot: %w", m.mv.ID, err)
		}
	}
	return nil
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
	if err := m.resumeSlot(ctx); err != nil {
		return rep, err
	}
	start := time.Now()
	for {
		r, err := m.round(ctx)
		rep.Rounds++
		rep.Changes += r.changes
		rep.Rows += r.rows
		if err != nil {
			return rep, err
		}
		insert, _, err := positions(ctx, m.src.DB)
		if err != nil {
			return rep, err
		}
		rep.LagBytes = int64(insert) - int64(r.reached)
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
