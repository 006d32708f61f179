package sharding

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/sharding/internal/clauses"
	"github.com/freshread/freshread/sharding/internal/sqltext"
)

// A lookup that caches its pairs (package lookup, in Redis) can hold a
// stale pair: the cache was unreachable when a rolled-back Create's pair
// was deleted, or when a Delete's was, and again when the ID was then
// created for another user (the table has the new pair, the cache the
// old one). A statement routed by that pair runs on the old user's shard
// and does not find the order. So when a statement routed by order IDs
// the lookup placed returns fewer rows than it named IDs, the plugin asks
// the lookup to check the IDs the answer lacks against its table
// (LookupRefresher): the IDs a read returned are read from its
// destination when it holds the ID column, otherwise every ID is
// checked. A statement that returned a row for every ID it named pays
// nothing. If a cached pair was wrong, and the corrected one places its
// order on a shard the statement did not reach, then
//
//   - outside a transaction, the statement is routed again with the
//     corrected pairs (over several shards if they now span them, or
//     refused as any such statement the plugin cannot merge). A read runs
//     again whole; a write that changed no row too; a write that changed
//     rows runs again only for the orders of the stale pairs (its
//     condition and "ID IN" those), so no row is changed twice, and its
//     rows are added up. A raw write (Exec) cannot be narrowed so: it
//     returns ErrStaleLookup, naming the IDs it did not reach.
//   - inside a transaction (bound to one shard) it cannot be: the
//     statement returns ErrStaleLookup instead of its answer; the pairs
//     are corrected, so the transaction run again is routed right.
//
// A read whose answer does not tell how many of its orders it found —
// Row, Rows, Scan (the plugin does not see the rows they return; Raw
// reads too), or an aggregate (count(*) of an order the statement missed
// is one row, 0) — is checked before it is routed instead: the pairs of
// the order IDs it names that were not minted are read from the lookup's
// table (LookupRefresher.Refresh, which corrects the cache), then the IDs
// are placed. That costs every such read by a cached ID one read of the
// cache and one of the lookup's table more.
//
// Statements pinned to a shard (Sharding.On, ForUser, a hint) are not
// routed by pairs and are not checked.

// LookupRefresher is implemented by a Lookup that answers from a cache
// (lookup.Store): Refresh reads orderIDs from the lookup's own table,
// corrects the cached pairs that differ from it, and returns the IDs it
// corrected. Called only after a statement routed through the lookup
// returned fewer rows than it named order IDs.
type LookupRefresher interface {
	Refresh(ctx context.Context, orderIDs []int64) ([]int64, error)
}

// retryStalePairs checks the lookup pairs that routed the statement when
// it returned fewer rows than it named IDs, and reports whether to route
// it again (then the default chain's parked state is cleared); inside a
// transaction it sets ErrStaleLookup instead.
func (s *Sharding) retryStalePairs(db *gorm.DB, op opKind, at *attempt) bool {
	tg := at.tg
	if at.pairsChecked || tg == nil || len(tg.ids) == 0 || !tg.bounded || op == opRow || op == opCreate || tg.pinned {
		return false
	}
	h, ok := db.Error.(*handled)
	if !ok || (h.err != nil && !errors.Is(h.err, gorm.ErrRecordNotFound)) || h.rows >= int64(len(tg.ids)) {
		return false
	}
	asked := distinctIDs(tg.ids)
	if h.rows >= int64(len(asked)) {
		return false
	}
	rf, ok := s.cfg.Lookup.(LookupRefresher)
	if !ok {
		return false
	}
	ids := lackingIDs(db.Statement, tg, asked, h.rows)
	at.pairsChecked = true
	if len(ids) == 0 {
		return false
	}
	ctx := db.Statement.Context
	stale, err := rf.Refresh(ctx, ids)
	if err != nil || len(stale) == 0 {
		return false
	}
	now, _ := s.resolveIDs(ctx, tg.pl, stale)
	var missed []int64
	for _, id := range stale {
		if si, ok := now[id]; !ok || !tg.reached(id, si) {
			missed = append(missed, id)
		}
	}
	if len(missed) == 0 {
		return false // the corrected pairs place the orders where it ran
	}
	switch {
	case tg.tx != nil || tg.lazy != nil:
		where := "the transaction's shard"
		if tg.tx != nil {
			where = fmt.Sprintf("shard %q of the transaction", tg.tx.name)
		}
		h.err = fmt.Errorf("%w: %s on %q ran on %s, where the lookup's cache placed order IDs %v; their pairs were stale and are corrected now: roll back and run the transaction again",
			ErrStaleLookup, op, tg.t.Name, where, missed)
		return false
	case h.rows == 0 || !tg.write:
		// Nothing changed: run it again whole.
	case tg.raw:
		h.err = fmt.Errorf("%w: %s on %q changed %d rows, but the lookup's cache had placed order IDs %v on shards they are not on (their pairs are corrected now); a raw statement cannot be run again for those IDs alone: run it for them",
			ErrStaleLookup, op, tg.t.Name, h.rows, missed)
		return false
	default:
		// Run again for the orders of the stale pairs only: the rows it
		// changed are not changed twice.
		clauses.AndWhere(db.Statement, clause.IN{Column: clause.Column{Table: clause.CurrentTable, Name: tg.t.ID}, Values: toAny(missed)})
		at.rows += h.rows
		at.ids = append(at.ids, tg.ids...)
	}
	db.Error = nil
	db.RowsAffected = 0
	return true
}

// verifyUncounted has the lookup check, before the statement is routed,
// the pairs of the order IDs ids a read names when its answer cannot
// show that it missed some (uncountedRead).
func (s *Sharding) verifyUncounted(db *gorm.DB, tg *target, ids []int64) error {
	if tg.write || tg.pinned || !uncountedRead(db.Statement, tg.op) {
		return nil
	}
	rf, ok := s.cfg.Lookup.(LookupRefresher)
	if !ok {
		return nil
	}
	var check []int64
	for _, id := range distinctIDs(ids) {
		if _, minted := tg.pl.minted(id); !minted {
			check = append(check, id)
		}
	}
	if len(check) == 0 {
		return nil
	}
	if lookupChecks != nil {
		lookupChecks(len(check))
	}
	if _, err := rf.Refresh(db.Statement.Context, check); err != nil {
		return fmt.Errorf("sharding: %s on %q: checking the lookup pairs of order IDs %v: %w", tg.op, tg.t.Name, check, err)
	}
	return nil
}

// lookupChecks, when set (tests), is told of each check verifyUncounted
// makes and of how many IDs.
var lookupChecks func(ids int)

// uncountedRead reports whether a read's answer does not show how many
// rows it found: it runs through GORM's Row chain (Row, Rows, Scan, Raw
// reads), whose rows the plugin does not see, or it aggregates (an
// aggregate in its select list, or GROUP BY).
func uncountedRead(stmt *gorm.Statement, op opKind) bool {
	switch op {
	case opRow:
		return true
	case opQuery:
	default:
		return false
	}
	if _, ok := stmt.Clauses["GROUP BY"]; ok {
		return true
	}
	if c, ok := stmt.Clauses["SELECT"]; ok && c.Expression != nil {
		switch e := c.Expression.(type) {
		case clause.Expr:
			if sqltext.Aggregate.MatchString(e.SQL) {
				return true
			}
		case clause.Select:
			for _, col := range e.Columns {
				if sqltext.Aggregate.MatchString(col.Name) {
					return true
				}
			}
			if e.Expression != nil {
				return true
			}
		default:
			return true
		}
	}
	for _, sel := range stmt.Selects {
		if sqltext.Aggregate.MatchString(sel) {
			return true
		}
	}
	return false
}

// reached reports whether the statement of tg ran where order id's row
// would be found if it is on shard si: the transaction's shard, the
// shard its part of a split IN list of IDs went to, or any shard the
// statement ran on.
func (tg *target) reached(id int64, si int) bool {
	switch {
	case tg.tx != nil:
		return si == tg.tx.index
	case tg.lazy != nil:
		return false // bound to no shard: it ran nowhere
	case (tg.split >= 0 && tg.splitCol == tg.t.ID) || tg.rawParts != nil:
		old, ok := tg.idShard[id]
		return ok && old == si
	}
	return tg.mask&(1<<si) != 0
}

// lackingIDs returns the order IDs placed through the lookup (not
// minted) whose rows the answer may lack: for a read whose destination
// holds the ID column, those of the IDs asked it did not return;
// otherwise all of them.
func lackingIDs(stmt *gorm.Statement, tg *target, asked []int64, rows int64) []int64 {
	var got map[int64]bool
	if tg.op == opQuery && rows > 0 {
		got = answerIDs(stmt, tg.t.ID)
	}
	var out []int64
	for _, id := range asked {
		if !IsMinted(id) && !got[id] {
			out = append(out, id)
		}
	}
	return out
}

// answerIDs reads the order IDs of the rows a read put in its
// destination: structs of the statement's model, or maps, holding the ID
// column. It returns nil when any row does not hold it.
func answerIDs(stmt *gorm.Statement, col string) map[int64]bool {
	if stmt.Dest == nil {
		return nil
	}
	ctx := stmt.Context
	var f *schemaField
	if stmt.Schema != nil {
		f = stmt.Schema.LookUpField(col)
	}
	got := map[int64]bool{}
	one := func(row reflect.Value) bool {
		row = reflect.Indirect(row)
		switch row.Kind() {
		case reflect.Struct:
			if f == nil || row.Type() != stmt.Schema.ModelType {
				return false
			}
		case reflect.Map:
			if row.Type().Key().Kind() != reflect.String {
				return false
			}
		default:
			return false
		}
		id, ok := rowValue(ctx, row, f, col)
		got[id] = true
		return ok && id != 0
	}
	rv := reflect.Indirect(reflect.ValueOf(stmt.Dest))
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		for i := 0; i < rv.Len(); i++ {
			if !one(rv.Index(i)) {
				return nil
			}
		}
	default:
		if !one(rv) {
			return nil
		}
	}
	return got
}

func distinctIDs(ids []int64) []int64 {
	seen := make(map[int64]bool, len(ids))
	out := make([]int64, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
