package tracker

import (
	"context"
	"fmt"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// ModeStats: poll pg_stat_user_tables and raise a table to the current
// WAL position when its counters move.
//
// The window: a backend reports its table counters to the cumulative
// statistics system after its transaction ends, when it goes idle, at
// most once per PGSTAT_MIN_INTERVAL (1 s, PostgreSQL 15+; 500 ms through
// the stats collector before), and later under contention (up to
// PGSTAT_MAX_INTERVAL, 60 s). A direct write is thus raised up to ~1 s
// (+ StatsInterval) after its commit, exceptionally later; a read in that
// window may be stale. The position recorded is read after the counters,
// so it is past the commit that moved them.

const statsQuery = `
SELECT relname::text,
       n_tup_ins + n_tup_upd + n_tup_del,
       n_live_tup, n_dead_tup, coalesce(n_mod_since_analyze, 0)
FROM pg_stat_user_tables`

type tableCounters [4]int64

func (w *worker) statsLoop(ctx context.Context) {
	var last map[string]tableCounters
	w.ticker(ctx, "stats", w.t.cfg.StatsInterval, func(ctx context.Context) error {
		next, err := w.statsOnce(ctx, last)
		if err == nil {
			last = next
		}
		return err
	})
}

// statsOnce reads the counters, then the current position, and raises the
// tables whose counters moved since last. The first poll (last == nil)
// knows nothing of earlier writes: it raises the unknown-tables position,
// which every read includes.
func (w *worker) statsOnce(ctx context.Context, last map[string]tableCounters) (map[string]tableCounters, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p, err := w.pool("primary")
	if err != nil {
		return nil, err
	}
	rows, err := p.Query(ctx, statsQuery)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_user_tables: %w", err)
	}
	next := map[string]tableCounters{}
	for rows.Next() {
		var name string
		var c tableCounters
		if err := rows.Scan(&name, &c[0], &c[1], &c[2], &c[3]); err != nil {
			rows.Close()
			return nil, err
		}
		t := lsnstore.TableKey(name)
		// Tables of one name in several schemas share a key: sum them.
		old := next[t]
		for i := range c {
			old[i] += c[i]
		}
		next[t] = old
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var s string
	if err := p.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		return nil, fmt.Errorf("read pg_current_wal_insert_lsn(): %w", err)
	}
	pos, err := lsnstore.ParseLSN(s)
	if err != nil {
		return nil, err
	}
	if last == nil {
		if err := w.writes.Raise(ctx, nil, lsnstore.PositionOf(pos)); err != nil {
			return nil, err
		}
		return next, nil
	}
	var moved []string
	for t, c := range next {
		if o, ok := last[t]; !ok || o != c {
			moved = append(moved, t)
		}
	}
	if len(moved) > 0 {
		if err := w.writes.Raise(ctx, moved, lsnstore.PositionOf(pos)); err != nil {
			return nil, err // last is kept: the next poll raises them again
		}
		w.t.metrics.statsRaises.WithLabelValues(w.id).Add(float64(len(moved)))
		w.log.Debug("direct writes seen in pg_stat_user_tables", "tables", moved, "position", pos.String())
	}
	return next, nil
}
