package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A transaction's changes can be decoded once its commit record is
// flushed, but other sessions see them only once the transaction has left
// the proc array. Between the two lie a moment, or as long as a
// synchronous standby takes to confirm. A row re-read in that window is
// the row as it was before the transaction, so:
//
//   - the catch-up waits, before it re-reads a batch's rows, until a
//     snapshot of the source sees every transaction of the batch (a later
//     snapshot then sees them too);
//   - Prepare waits, once the slot exists, until every transaction that
//     was running just after the slot's consistent point has ended: one
//     that committed in the WAL before that point is not decoded, so the
//     copy must see it.

// pgSnapshot is a snapshot as pg_current_snapshot() prints it: full
// (epoch-extended) transaction ids.
type pgSnapshot struct {
	xmin, xmax uint64
	xip        []uint64
}

// parseSnapshot parses "xmin:xmax:xip,xip,...".
func parseSnapshot(s string) (pgSnapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return pgSnapshot{}, fmt.Errorf("reshard: malformed snapshot %q", s)
	}
	ids := parts[:2]
	if parts[2] != "" {
		ids = append(ids, strings.Split(parts[2], ",")...)
	}
	vals := make([]uint64, len(ids))
	for i, x := range ids {
		v, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return pgSnapshot{}, fmt.Errorf("reshard: malformed snapshot %q: %w", s, err)
		}
		vals[i] = v
	}
	snap := pgSnapshot{xmin: vals[0], xmax: vals[1], xip: vals[2:]}
	if snap.xmin > snap.xmax {
		return pgSnapshot{}, fmt.Errorf("reshard: malformed snapshot %q: xmin after xmax", s)
	}
	return snap, nil
}

// running reports whether the snapshot shows transaction x in progress.
func (s pgSnapshot) running(x uint64) bool {
	return x >= s.xmax || (x >= s.xmin && slices.Contains(s.xip, x))
}

// fullXid extends a 32-bit transaction id (as test_decoding prints it) to
// the full id nearest to near: the decoded transactions are recent, far
// closer than 2^31 ids to the snapshot's.
func fullXid(near uint64, xid uint32) uint64 {
	d := int64(int32(xid - uint32(near)))
	if d < 0 && uint64(-d) > near {
		return 0
	}
	return uint64(int64(near) + d)
}

// inFlight is the transactions that may have committed in the WAL without
// being visible yet: those a snapshot shows running (xip), and every id
// from its xmax up to an id assigned after it.
type inFlight struct {
	xip      []uint64
	from, to uint64
}

// pendingIn returns one transaction of f that s still shows running.
func (s pgSnapshot) pendingIn(f inFlight) (uint64, bool) {
	for _, x := range f.xip {
		if s.running(x) {
			return x, true
		}
	}
	if f.from < f.to {
		if s.xmax < f.to {
			return max(f.from, s.xmax), true
		}
		for _, x := range s.xip {
			if x >= f.from && x < f.to {
				return x, true
			}
		}
	}
	return 0, false
}

// currentSnapshot reads a fresh snapshot of db.
func currentSnapshot(ctx context.Context, db *sql.DB) (pgSnapshot, error) {
	var text string
	if err := db.QueryRowContext(ctx, `SELECT pg_current_snapshot()::text`).Scan(&text); err != nil {
		return pgSnapshot{}, err
	}
	return parseSnapshot(text)
}

// readInFlight returns the transactions running on db now.
func readInFlight(ctx context.Context, db *sql.DB) (inFlight, error) {
	s, err := currentSnapshot(ctx, db)
	if err != nil {
		return inFlight{}, err
	}
	var next string
	if err := db.QueryRowContext(ctx, `SELECT pg_current_xact_id()::text`).Scan(&next); err != nil {
		return inFlight{}, err
	}
	to, err := strconv.ParseUint(next, 10, 64)
	if err != nil {
		return inFlight{}, fmt.Errorf("reshard: malformed transaction id %q: %w", next, err)
	}
	return inFlight{xip: s.xip, from: s.xmax, to: to}, nil
}

// maxAwaitInterval bounds awaitEnded's back-off.
const maxAwaitInterval = 200 * time.Millisecond

// awaitEnded waits until a snapshot of db shows none of f running.
func awaitEnded(ctx context.Context, db *sql.DB, f inFlight, interval time.Duration) error {
	return awaitSnapshot(ctx, db, interval, func(s pgSnapshot) (uint64, bool) { return s.pendingIn(f) })
}

// awaitSnapshot reads snapshots of db until pending finds no transaction
// still running in one, looking again after interval, then less and less
// often (up to maxAwaitInterval): a long transaction is not polled 200
// times a second.
func awaitSnapshot(ctx context.Context, db *sql.DB, interval time.Duration, pending func(pgSnapshot) (uint64, bool)) error {
	var x uint64 // the transaction found running at the last look
	for {
		s, err := currentSnapshot(ctx, db)
		if err != nil {
			if x != 0 && ctx.Err() != nil {
				// The context ended during a look (a loaded server):
				// the error names what was waited for all the same.
				return fmt.Errorf("transaction %d still running%s: %w", x, holderOf(db, x), ctx.Err())
			}
			return err
		}
		var running bool
		if x, running = pending(s); !running {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("transaction %d still running%s: %w", x, holderOf(db, x), ctx.Err())
		case <-time.After(interval):
		}
		interval = min(2*interval, max(interval, maxAwaitInterval))
	}
}

// holderOf describes the session running transaction x, for an error
// (best effort: "" when it cannot be found).
func holderOf(db *sql.DB, x uint64) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var pid int
	var datname, app, state sql.NullString
	err := db.QueryRowContext(ctx, `SELECT pid, datname, application_name, state FROM pg_stat_activity WHERE backend_xid::text = $1`,
		strconv.FormatUint(x&0xffffffff, 10)).Scan(&pid, &datname, &app, &state)
	if err != nil {
		return ""
	}
	return fmt.Sprintf(" (pid %d on database %q, application %q, %s)", pid, datname.String, app.String, state.String)
}

// awaitDecoded waits until a snapshot of the source sees every
// transaction of xids committed (the slot decoded their commits). One
// query when they all are.
func (f *pgFeed) awaitDecoded(ctx context.Context, xids []uint32) error {
	m := f.m
	if len(xids) == 0 {
		return nil
	}
	err := awaitSnapshot(ctx, m.src.DB, m.cfg.PollInterval, func(s pgSnapshot) (uint64, bool) {
		for _, x := range xids {
			if full := fullXid(s.xmax, x); s.running(full) {
				return full, true
			}
		}
		return 0, false
	})
	if err != nil {
		return fmt.Errorf("reshard: move %s: wait until the decoded transactions are visible on %s: %w", m.mv.ID, m.src.Name, err)
	}
	return nil
}
