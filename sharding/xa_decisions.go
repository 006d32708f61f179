package sharding

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/freshread/freshread/internal/engines"
)

// The coordinator's decisions of writes over several MariaDB shards
// (xa.go): read, recorded as aborted by recovery, deleted once no part
// needs them.

// forgetDecision deletes the decision row of a write all of whose parts
// committed, in the background: off the write's path, and in batches
// when writes come faster than the deletes. A row left behind (the
// process stopped first, a delete failed) is removed by RecoverPrepared's
// sweep.
func (s *Sharding) forgetDecision(coord *shard, gtrid string) {
	tp := &s.tp
	tp.mu.Lock()
	if tp.ctx == nil || tp.ctx.Err() != nil {
		tp.mu.Unlock()
		return
	}
	if tp.forget == nil {
		tp.forget = map[*shard][]string{}
	}
	tp.forget[coord] = append(tp.forget[coord], gtrid)
	start := !tp.forgetting
	tp.forgetting = true
	if start {
		tp.wg.Add(1)
	}
	tp.mu.Unlock()
	if start {
		go s.deleteDecisions()
	}
}

// deleteDecisions deletes the rows forgetDecision queued until none is
// left.
func (s *Sharding) deleteDecisions() {
	tp := &s.tp
	defer tp.wg.Done()
	for {
		tp.mu.Lock()
		batch := tp.forget
		tp.forget = nil
		if len(batch) == 0 || tp.ctx.Err() != nil {
			tp.forgetting = false
			tp.mu.Unlock()
			return
		}
		tp.mu.Unlock()
		for coord, gtrids := range batch {
			for len(gtrids) > 0 {
				n := min(len(gtrids), 500)
				args := make([]any, n)
				for i, g := range gtrids[:n] {
					args[i] = g
				}
				q := "DELETE FROM " + xaDecisions + " WHERE gtrid IN (?" + strings.Repeat(",?", n-1) + ")"
				if _, err := coord.primaryExec(tp.ctx, q, args...); err != nil && tp.ctx.Err() == nil {
					s.logger().Debug("sharding: delete decision rows (RecoverPrepared sweeps them)", "shard", coord.name, "err", err)
				}
				gtrids = gtrids[n:]
			}
		}
	}
}

// xaDecision returns the decision of the write gtrid coordinated by
// coord: "c" (committed), "a" (aborted), or "" while its coordinator's
// transaction is open. With no decision row it records "aborted", which
// waits for the coordinator's own uncommitted row if there is one.
func (s *Sharding) xaDecision(ctx context.Context, coord *shard, gtrid string) (string, error) {
	for range 2 {
		var outcome string
		err := coord.primaryRow(ctx, "SELECT outcome FROM "+xaDecisions+" WHERE gtrid = ?", gtrid).Scan(&outcome)
		if err == nil {
			return outcome, nil
		}
		if n, _ := engines.MySQLErrorNumber(err); n == 1146 { // no table: no write ever recorded a decision there
			if _, err := coord.primaryExec(ctx, xaDecisionsDDL); err != nil {
				return "", fmt.Errorf("sharding: create the table of decisions on shard %q: %w", coord.name, err)
			}
		} else if !errors.Is(err, sql.ErrNoRows) {
			return "", fmt.Errorf("sharding: read the decision of %q on shard %q: %w", gtrid, coord.name, err)
		}
		_, err = coord.primaryExec(ctx, "SET STATEMENT innodb_lock_wait_timeout = 1 FOR INSERT INTO "+xaDecisions+" (gtrid, outcome) VALUES (?, 'a')", gtrid)
		n, _ := engines.MySQLErrorNumber(err)
		switch {
		case err == nil:
			return "a", nil
		case n == 1205: // lock wait timeout: the coordinator's transaction holds its row
			return "", nil
		case n != 1062: // not a duplicate: the row committed meanwhile (read it again)
			return "", fmt.Errorf("sharding: record the abort of %q on shard %q: %w", gtrid, coord.name, err)
		}
	}
	return "", nil
}

// sweepXADecisions deletes the decision rows no part needs any longer:
// every "aborted" row (with none, recovery finds the write aborted all
// the same), and every "committed" row none of whose parts' shards holds
// one of its parts prepared. rows were read before prepared was listed: a
// write whose committed row was read then had all its parts prepared
// already, so one missing from prepared was resolved. A row naming a
// shard this process does not know (added by a newer configuration) is
// kept.
func (s *Sharding) sweepXADecisions(ctx context.Context, rows map[*shard][]xaDecisionRow, prepared map[string]bool) error {
	var errs []error
	for coord, list := range rows {
		for _, r := range list {
			if r.outcome == "c" && (prepared[r.gtrid] || !s.knowsAll(r.parts)) {
				continue
			}
			if _, err := coord.primaryExec(ctx, "DELETE FROM "+xaDecisions+" WHERE gtrid = ?", r.gtrid); err != nil {
				errs = append(errs, fmt.Errorf("sharding: delete a decision row on shard %q: %w", coord.name, err))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// knowsAll reports whether parts is a JSON array of names of shards this
// process knows.
func (s *Sharding) knowsAll(parts string) bool {
	var names []string
	if json.Unmarshal([]byte(parts), &names) != nil {
		return false
	}
	for _, n := range names {
		if s.byName[n] == nil {
			return false
		}
	}
	return true
}

// xaDecisionRow is a row of a coordinator's decision table.
type xaDecisionRow struct {
	gtrid, outcome, parts string
}

// xaDecisionRows lists the decision rows on coord (none when it has no
// table).
func (sh *shard) xaDecisionRows(ctx context.Context) ([]xaDecisionRow, error) {
	db, err := sh.sqlDB()
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, "SELECT gtrid, outcome, COALESCE(parts, '') FROM "+xaDecisions+" LIMIT 10000")
	if n, _ := engines.MySQLErrorNumber(err); n == 1146 {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []xaDecisionRow
	for rows.Next() {
		var g []byte
		var r xaDecisionRow
		if err := rows.Scan(&g, &r.outcome, &r.parts); err != nil {
			return nil, err
		}
		r.gtrid = string(g)
		out = append(out, r)
	}
	return out, rows.Err()
}
