package sharding

import (
	"context"
	"errors"

	"gorm.io/gorm"
)

// A lookup that caches its pairs (package lookup, in Redis) can hold a
// stale pair: the cache was unreachable when a rolled-back Create's pair
// was deleted, or when a Delete's was, and again when the ID was then
// created for another user (the table has the new pair, the cache the
// old one). A statement routed by that pair runs on the old user's shard
// and finds nothing. So when a statement outside a transaction, routed by
// order IDs the lookup placed, finds no row, the plugin asks the lookup
// to check those IDs against its table (LookupRefresher); if a cached
// pair was wrong, it is corrected and the statement is routed again. A
// statement that found no row changed none, so running it again is safe.

// LookupRefresher is implemented by a Lookup that answers from a cache
// (lookup.Store): Refresh reads orderIDs from the lookup's own table,
// corrects the cached pairs that differ from it, and returns the IDs it
// corrected. Called only after a statement routed through the lookup
// found no row.
type LookupRefresher interface {
	Refresh(ctx context.Context, orderIDs []int64) ([]int64, error)
}

// retryStalePairs reports whether to route the statement again because
// the lookup pairs that routed it were stale (then the default chain's
// parked state is cleared).
func (s *Sharding) retryStalePairs(db *gorm.DB, op opKind, at *attempt) bool {
	tg := at.tg
	if at.pairsChecked || tg == nil || tg.reason != "lookup" || !tg.bounded || op == opRow || op == opCreate ||
		tg.tx != nil || tg.lazy != nil || tg.pinned {
		return false
	}
	h, ok := db.Error.(*handled)
	if !ok || h.rows != 0 || (h.err != nil && !errors.Is(h.err, gorm.ErrRecordNotFound)) {
		return false
	}
	rf, ok := s.cfg.Lookup.(LookupRefresher)
	if !ok {
		return false
	}
	var ids []int64
	for _, id := range tg.ids {
		if !IsMinted(id) {
			ids = append(ids, id)
		}
	}
	at.pairsChecked = true
	if len(ids) == 0 {
		return false
	}
	stale, err := rf.Refresh(db.Statement.Context, ids)
	if err != nil || len(stale) == 0 {
		return false
	}
	db.Error = nil
	db.RowsAffected = 0
	return true
}
