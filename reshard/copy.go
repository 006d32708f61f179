package reshard

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/freshread/freshread/sharding"
)

// CopyReport is what Copy did in this run.
type CopyReport struct {
	// Rows is the number of rows copied in this run.
	Rows int64
	// Tables is the number of rows copied per table, over every run.
	Tables map[string]int64
	// Duration is how long this run copied.
	Duration time.Duration
	// RowsPerSecond is Rows / Duration.
	RowsPerSecond float64
}

// Copy copies the moving buckets' rows of every table from the source to
// the target in keyset chunks of Config.ChunkRows, in primary key order.
// Each chunk is one transaction on the target that also records its last
// key, so an interrupted copy resumes after the last chunk that
// committed. A row of the target outside the moving buckets with the
// primary key of a copied row fails the copy with ErrForeignRow. A
// finished copy returns at once.
func (m *Mover) Copy(ctx context.Context) (CopyReport, error) {
	done, err := m.begin(ctx)
	if err != nil {
		return CopyReport{}, err
	}
	defer done()
	return m.copy(ctx)
}

func (m *Mover) copy(ctx context.Context) (CopyReport, error) {
	rep := CopyReport{Tables: map[string]int64{}}
	st, err := m.readState(ctx)
	if err != nil {
		return rep, err
	}
	switch {
	case !st.exists || st.phase == sharding.MovePlanned || st.phase == sharding.MoveRolledBack:
		return rep, fmt.Errorf("%w: move %s is not prepared", ErrPhase, m.mv.ID)
	case st.phase != sharding.MoveCopying:
		return rep, nil // copied
	}
	if err := m.feed.check(ctx); err != nil {
		return rep, err
	}
	if err := m.report(ctx, sharding.MoveCopying, sharding.NotCaughtUp); err != nil {
		return rep, err
	}
	if err := m.announce(ctx); err != nil {
		return rep, err
	}
	start := time.Now()
	m.cfg.Logger.InfoContext(ctx, "reshard: copying", "move", m.mv.ID)
	for _, t := range m.tables {
		last, total, fin, err := m.eng.copyProgress(ctx, m.dst.DB, m.cfg.Schema, m.mv.ID, t.cfg.Name)
		if err != nil {
			return rep, fmt.Errorf("reshard: move %s: copy progress of %s: %w", m.mv.ID, t.cfg.Name, err)
		}
		for !fin {
			rows, err := m.readChunk(ctx, t, last)
			if err != nil {
				return rep, fmt.Errorf("reshard: move %s: read %s from %s: %w", m.mv.ID, t.cfg.Name, m.src.Name, err)
			}
			if len(rows) == 0 {
				fin = true
			} else {
				last = make([]sql.NullString, len(t.pkIdx))
				for i, j := range t.pkIdx {
					if p := rows[len(rows)-1][j]; p != nil {
						last[i] = sql.NullString{String: *p, Valid: true}
					}
				}
			}
			err = m.eng.withTx(ctx, m.dst.DB, func(tx *sql.Tx) error {
				if len(rows) > 0 {
					if err := t.ops.upsert(ctx, tx, m.dst.Name, rows, m.mv.Buckets); err != nil {
						return err
					}
				}
				return m.eng.saveCopyProgress(ctx, tx, m.cfg.Schema, m.mv.ID, t.cfg.Name, last, len(rows), fin)
			})
			if err != nil {
				return rep, fmt.Errorf("reshard: move %s: copy %s to %s: %w", m.mv.ID, t.cfg.Name, m.dst.Name, err)
			}
			if len(rows) > 0 {
				m.recordWrite(ctx, t.cfg.Name)
			}
			total += int64(len(rows))
			rep.Rows += int64(len(rows))
			rep.Tables[t.cfg.Name] = total
			if m.cfg.Progress != nil && len(rows) > 0 {
				el := time.Since(start)
				m.cfg.Progress(Progress{Move: m.mv.ID, Phase: sharding.MoveCopying, Table: t.cfg.Name, Rows: rep.Rows, RowsPerSecond: float64(rep.Rows) / el.Seconds()})
			}
			if err := m.at("copy:chunk"); err != nil {
				return rep, err
			}
		}
		rep.Tables[t.cfg.Name] = total
	}
	rep.Duration = time.Since(start)
	if rep.Duration > 0 {
		rep.RowsPerSecond = float64(rep.Rows) / rep.Duration.Seconds()
	}
	if err := m.setPhase(ctx, m.dst.DB, sharding.MoveCatchingUp); err != nil {
		return rep, err
	}
	m.cfg.Logger.InfoContext(ctx, "reshard: copied", "move", m.mv.ID, "rows", rep.Rows, "rows_per_s", int64(rep.RowsPerSecond))
	return rep, m.report(ctx, sharding.MoveCatchingUp, sharding.NotCaughtUp)
}

// readChunk reads the next chunk of the moving buckets' rows of t from the
// source after the key last (none: from the start), as text.
func (m *Mover) readChunk(ctx context.Context, t *movingTable, last []sql.NullString) ([][]*string, error) {
	var out [][]*string
	err := m.eng.withTx(ctx, m.src.DB, func(tx *sql.Tx) error {
		var err error
		out, err = t.ops.readChunk(ctx, tx, m.mv.Buckets, last, m.cfg.ChunkRows)
		return err
	})
	return out, err
}

// textRows runs a query whose first n columns are text and returns them.
func textRows(ctx context.Context, q querier, n int, query string, args ...any) ([][]*string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]*string
	for rows.Next() {
		vals := make([]sql.NullString, n)
		dest := make([]any, n)
		for i := range vals {
			dest[i] = &vals[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		row := make([]*string, n)
		for i, v := range vals {
			if v.Valid {
				s := v.String
				row[i] = &s
			}
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

// columns turns rows into one array per column (the unnest parameters).
func columns(rows [][]*string, idx []int) []any {
	out := make([]any, len(idx))
	for k, j := range idx {
		col := make([]*string, len(rows))
		for i, r := range rows {
			col[i] = r[j]
		}
		out[k] = col
	}
	return out
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// foreignRowError is ErrForeignRow for the target's rows foreign (their
// primary key, then their shard key, as text) that use the keys of rows
// being moved outside the moving buckets.
func foreignRowError(t *movingTable, dst string, foreign [][]*string) error {
	var keys []string
	for _, f := range foreign {
		key := make([]string, len(t.pkIdx))
		for i := range key {
			key[i] = deref(f[i])
		}
		keys = append(keys, fmt.Sprintf("(%s)=(%s) with %s %s", strings.Join(pkNames(t), ", "), strings.Join(key, ", "), t.dst.key.name, deref(f[len(t.pkIdx)])))
	}
	return fmt.Errorf("%w: %s on %s: %s", ErrForeignRow, t.cfg.Name, dst, strings.Join(keys, "; "))
}

func pkNames(t *movingTable) []string {
	out := make([]string, len(t.dst.pk))
	for i, c := range t.dst.pk {
		out[i] = c.name
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}

// recordWrite tells the target's freshread plugin about a committed write
// as soon as it is made (the switch's recordMoved is the one that must
// succeed).
func (m *Mover) recordWrite(ctx context.Context, tables ...string) {
	if m.dst.RecordWrite == nil {
		return
	}
	if err := m.dst.RecordWrite(ctx, tables...); err != nil {
		m.cfg.Logger.WarnContext(ctx, "reshard: recording the copied rows' position failed; the shard's plugin reads the primary until it is published", "move", m.mv.ID, "err", err)
	}
}

// jsonStrings parses a JSON array of strings and nulls.
func jsonStrings(s string) ([]sql.NullString, error) {
	var vals []*string
	if err := json.Unmarshal([]byte(s), &vals); err != nil {
		return nil, err
	}
	out := make([]sql.NullString, len(vals))
	for i, v := range vals {
		if v != nil {
			out[i] = sql.NullString{String: *v, Valid: true}
		}
	}
	return out, nil
}

// nullStrings converts a key to a text[] parameter.
func nullStrings(ns []sql.NullString) []*string {
	out := make([]*string, len(ns))
	for i, n := range ns {
		if n.Valid {
			s := n.String
			out[i] = &s
		}
	}
	return out
}
