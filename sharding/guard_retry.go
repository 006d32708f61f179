package sharding

import (
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/engines"
)

// The shard guard (package reshard) makes a shard refuse, with SQLSTATE
// GuardSQLState, a write for a bucket it does not own or whose move is
// switching. A process that routed with an old map gets that error
// instead of writing to the wrong shard; the plugin turns it into
// ErrBucketMoved, refreshes the map at once and, for a statement outside
// any transaction, routes it again with the new map until Config.MoveWait
// has passed. Inside a transaction the error is returned (the other
// statements of the transaction ran on the old owner: the caller rolls
// back and runs it again, and it then begins on the new owner).

const (
	retryFirstDelay = 5 * time.Millisecond
	retryMaxDelay   = 100 * time.Millisecond
)

// attempt is the retry state of one statement.
type attempt struct {
	n        int     // retries so far
	tg       *target // the last attempt's target (nil: not a sharded table's)
	deadline int64   // monoNow after which the statement is not retried
	delay    time.Duration
	done     map[int]int // rows of a Create inserted by earlier attempts -> their shard
	// pairsChecked: the lookup pairs that routed the statement were
	// checked against the lookup's table (lookup_stale.go); rows and ids:
	// the rows a write changed before it was routed again for the orders
	// of stale pairs, and the order IDs it named then.
	pairsChecked bool
	rows         int64
	ids          []int64
}

// isGuardError reports whether err carries the shard guard's SQLSTATE:
// PostgreSQL's error (RAISE ... ERRCODE), or MariaDB's and MySQL's
// (SIGNAL SQLSTATE, error 1644).
func isGuardError(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == GuardSQLState
	}
	state, ok := engines.MySQLSQLState(err)
	return ok && state == GuardSQLState
}

// retryGuarded inspects the outcome of an attempt. When a shard refused
// it with the guard's error it wraps the error in ErrBucketMoved,
// refreshes the map and reports whether to run the statement again
// (then the default chain's parked state is cleared).
func (s *Sharding) retryGuarded(db *gorm.DB, op opKind, at *attempt) bool {
	tg := at.tg
	h, ok := db.Error.(*handled)
	if !ok || h.err == nil || tg == nil || !isGuardError(h.err) {
		return false
	}
	s.stats.bucketMoved.Add(1)
	h.err = fmt.Errorf("%w: %s on %q routed with map version %d: %w", ErrBucketMoved, op, tg.t.Name, tg.pl.rt.version, h.err)
	if s.fol == nil {
		return false // no shared map: routing again would go to the same shard
	}
	ctx := db.Statement.Context
	_ = s.refresh(ctx)
	if !retryable(tg) || s.cfg.MoveWait < 0 {
		return false
	}
	now := monoNow()
	if at.n == 0 {
		at.deadline = now + int64(s.cfg.MoveWait)
		at.delay = retryFirstDelay
	}
	if now >= at.deadline {
		return false
	}
	if tg.create != nil && len(tg.create.inserted) > 0 {
		// A Create split over shards: the shards before the one that
		// refused it inserted their rows; only the rest is routed again.
		if at.done == nil {
			at.done = map[int]int{}
		}
		for _, i := range tg.create.inserted {
			at.done[i] = tg.create.shardOf(i)
		}
	}
	if s.rt.Load().version == tg.pl.rt.version {
		// No new map yet (its move is switching): wait, and look again.
		d := min(at.delay, time.Duration(at.deadline-now))
		at.delay = min(2*at.delay, retryMaxDelay)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		_ = s.refresh(ctx)
	}
	at.n++
	s.stats.retries.Add(1)
	db.Error = nil
	db.RowsAffected = 0
	return true
}

// retryable: the statement ran outside any transaction, was routed by the
// map (not pinned to a shard) and either reached one shard (the refused
// statement did nothing), or ran over several in its own transactions,
// rolled back (statement_tx.go), or is a Create (the rows that stayed
// inserted are known).
func retryable(tg *target) bool {
	if tg.tx != nil || tg.lazy != nil || tg.pinned {
		return false
	}
	return tg.create != nil || tg.rolledBack || bits.OnesCount64(tg.mask) == 1
}
