package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"
)

// pgFeed is the catch-up on PostgreSQL. It reads the slot's changes
// (pg_logical_slot_peek_changes), keeps the primary keys of the moving
// tables' changed rows, waits until the source shows their transactions
// committed (visible.go), reads those rows as they are now on the
// source, and on the target upserts the ones in a moving bucket and
// deletes the others (within the moving buckets). Whatever the order of
// the changes, this converges to the source's state; replaying a batch is
// harmless, so the slot is advanced (pg_replication_slot_advance) only
// after the target committed, and a crash in between replays the batch.
type pgFeed struct{ m *Mover }

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

// create creates the move's logical slot on the source (dropping a
// rolled-back move's first when fresh) and returns its consistent point.
// A transaction whose commit record precedes that point is not decoded
// and may not be visible yet (visible.go): the copy must see it, so it
// waits for what runs now to end.
func (f *pgFeed) create(ctx context.Context, fresh bool) (string, error) {
	m := f.m
	if fresh {
		if err := dropSlot(ctx, m.src.DB, m.slot); err != nil {
			return "", fmt.Errorf("reshard: move %s: drop the old slot on %s: %w", m.mv.ID, m.src.Name, err)
		}
	}
	si, err := slotStatus(ctx, m.src.DB, m.slot)
	if err != nil {
		return "", fmt.Errorf("reshard: move %s: slot on %s: %w", m.mv.ID, m.src.Name, err)
	}
	start := si.confirmed
	if !si.exists {
		if start, err = createSlot(ctx, m.src.DB, m.slot); err != nil {
			return "", fmt.Errorf("reshard: move %s: create slot %s on %s: %w", m.mv.ID, m.slot, m.src.Name, err)
		}
	}
	if err := m.at("prepare:slot"); err != nil {
		return "", err
	}
	fl, err := readInFlight(ctx, m.src.DB)
	if err == nil {
		err = awaitEnded(ctx, m.src.DB, fl, m.cfg.PollInterval)
	}
	if err != nil {
		return "", fmt.Errorf("reshard: move %s: wait for the transactions running on %s: %w", m.mv.ID, m.src.Name, err)
	}
	return start.String(), nil
}

// check fails with ErrSlotLost when the move's slot is gone.
func (f *pgFeed) check(ctx context.Context) error {
	m := f.m
	si, err := slotStatus(ctx, m.src.DB, m.slot)
	if err != nil {
		return fmt.Errorf("reshard: move %s: slot on %s: %w", m.mv.ID, m.src.Name, err)
	}
	if !si.exists {
		return fmt.Errorf("%w: %s on %s (move %s): roll the move back and start again", ErrSlotLost, m.slot, m.src.Name, m.mv.ID)
	}
	return nil
}

// drop drops the slot.
func (f *pgFeed) drop(ctx context.Context) error {
	if err := dropSlot(ctx, f.m.src.DB, f.m.slot); err != nil {
		return fmt.Errorf("reshard: move %s: drop slot %s on %s: %w", f.m.mv.ID, f.m.slot, f.m.src.Name, err)
	}
	return nil
}

func (f *pgFeed) close() {}

// parseBatch keeps the changed keys of the moving tables.
func (f *pgFeed) parseBatch(rows []decodedRow) (*batch, error) {
	m := f.m
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

// apply applies a batch to the target and returns the rows re-read.
func (f *pgFeed) apply(ctx context.Context, b *batch) (int64, error) {
	m := f.m
	var rows int64
	if err := f.awaitDecoded(ctx, b.xids); err != nil {
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
	if err := m.eng.setApplied(ctx, m.dst.DB, m.cfg.Schema, m.mv.ID, b.end.String()); err != nil {
		return rows, fmt.Errorf("reshard: move %s: record the applied position: %w", m.mv.ID, err)
	}
	return rows, nil
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
func (f *pgFeed) flushBarrier(ctx context.Context) (walPos, error) {
	m := f.m
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
func (f *pgFeed) applyUpTo(ctx context.Context, upto walPos, advance bool) (changes, rows int64, err error) {
	m := f.m
	for {
		decoded, err := peek(ctx, m.src.DB, m.slot, upto, m.cfg.ApplyChanges)
		if err != nil {
			return changes, rows, fmt.Errorf("reshard: move %s: read the slot on %s: %w", m.mv.ID, m.src.Name, err)
		}
		if len(decoded) == 0 {
			return changes, rows, nil
		}
		b, err := f.parseBatch(decoded)
		if err != nil {
			return changes, rows, err
		}
		n, err := f.apply(ctx, b)
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

// round applies every change committed before now.
func (f *pgFeed) round(ctx context.Context) (roundResult, error) {
	r := roundResult{at: time.Now()}
	target, err := f.flushBarrier(ctx)
	if err != nil {
		return r, err
	}
	r.reached = uint64(target)
	r.changes, r.rows, err = f.applyUpTo(ctx, target, true)
	r.took = time.Since(r.at)
	return r, err
}

// last applies, in the switch's hold, every change committed before now,
// without advancing the slot (the switch drops it).
func (f *pgFeed) last(ctx context.Context) (int64, error) {
	target, err := f.flushBarrier(ctx)
	if err != nil {
		return 0, err
	}
	n, _, err := f.applyUpTo(ctx, target, false)
	return n, err
}

// lagBytes is the WAL from the round's position to the source's insert
// position now.
func (f *pgFeed) lagBytes(ctx context.Context, r roundResult) (int64, error) {
	insert, _, err := positions(ctx, f.m.src.DB)
	if err != nil {
		return 0, err
	}
	return int64(insert) - int64(r.reached), nil
}

// resume advances the slot to the position the target recorded last
// (a crash between the target's commit and the slot's advance).
func (f *pgFeed) resume(ctx context.Context) error {
	m := f.m
	if err := f.check(ctx); err != nil {
		return err
	}
	st, err := m.readState(ctx)
	if err != nil {
		return err
	}
	if st.appliedPos != "" {
		applied, err := parseLSN(st.appliedPos)
		if err != nil {
			return err
		}
		if err := advanceSlot(ctx, m.src.DB, m.slot, applied); err != nil {
			return fmt.Errorf("reshard: move %s: advance the slot: %w", m.mv.ID, err)
		}
	}
	return nil
}
