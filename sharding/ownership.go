package sharding

import (
	"fmt"
	"slices"
	"strings"

	"gorm.io/gorm/clause"
)

// Reads that reach shards other than by their key read only what each
// shard owns.
//
// A bucket move (package reshard) copies a bucket's rows to the target
// while the source still owns them, switches the ownership (a new map
// version), and deletes the source's rows later: meanwhile the rows of the
// bucket are on two shards, a partial copy on the target before the
// switch, a frozen stale one on the source after it. A read routed by its
// key goes to the owner of that key in the statement's snapshot and never
// sees the other copy. A read without a key (or whose per-shard statement
// is not restricted to the shard's own keys: an OR over keys of several
// shards) reads every owning shard, and would return such rows twice, or
// the stale copy. So, with a shared map (Config.Map), each per-shard
// statement of such a read gets an ownership predicate ANDed to its WHERE,
// computed from the snapshot that chose the shards:
//
//	(NOT ("orders"."user_id" % N BETWEEN a AND b OR ...) -- not another shard's buckets
//	   AND "orders"."user_id" NOT IN (...))              -- nor their hot users in its buckets
//	OR "orders"."user_id" IN (...)                       -- its hot users elsewhere
//
// with every number a bound parameter (prepare explains the NOT). Keys
// are non-negative (Algorithm.Bucket), so key % N is the key's bucket; a
// row whose key is NULL belongs to no bucket and is read by no such
// statement (one with a negative key, which the plugin never writes, by
// every shard holding it, as without the predicate).

// bucketSpan is a range of consecutive buckets, inclusive.
type bucketSpan struct{ first, last int }

// shardOwn is what one shard owns in a snapshot.
type shardOwn struct {
	spans   []bucketSpan // its buckets, as ranges, ascending
	exclude []int64      // hot users of other shards whose bucket it owns (sorted)
	include []int64      // its hot users whose bucket another shard owns (sorted)
	// The predicate (prepare): its text ("" when none is needed), its
	// variables with nil where the key column goes, and those places.
	sql  string
	tmpl []any
	cols []int
}

// ownershipOf computes, for each of shards shards, what it owns when
// bucket b is placed on place(b) (of buckets buckets) and hot user u on
// hot[u].
func ownershipOf(buckets int, place func(b int) int, hot map[int64]int, shards int) []shardOwn {
	own := make([]shardOwn, shards)
	for b := 0; b < buckets; {
		si := place(b)
		e := b
		for e+1 < buckets && place(e+1) == si {
			e++
		}
		own[si].spans = append(own[si].spans, bucketSpan{b, e})
		b = e + 1
	}
	for u, si := range hot {
		bs := place(int(uint64(u) % uint64(buckets)))
		if bs == si {
			continue // its rows are in the shard's buckets anyway
		}
		own[bs].exclude = append(own[bs].exclude, u)
		own[si].include = append(own[si].include, u)
	}
	for i := range own {
		slices.Sort(own[i].exclude)
		slices.Sort(own[i].include)
		own[i].prepare(buckets)
	}
	return own
}

// routingOwnership is ownershipOf for the snapshot's own placement.
func routingOwnership(bucketShard []uint8, hot map[int64]int, shards int) []shardOwn {
	return ownershipOf(len(bucketShard), func(b int) int { return int(bucketShard[b]) }, hot, shards)
}

// everything reports whether the shard owns every row it can hold: every
// bucket, and no other shard's hot user (then it has no hot user
// elsewhere either).
func (o *shardOwn) everything(buckets int) bool {
	return len(o.spans) == 1 && o.spans[0] == bucketSpan{0, buckets - 1} && len(o.exclude) == 0
}

// owns reports whether the shard owns key (what predicate says in SQL).
func (o *shardOwn) owns(key int64, buckets int) bool {
	if _, ok := slices.BinarySearch(o.include, key); ok {
		return true
	}
	if _, ok := slices.BinarySearch(o.exclude, key); ok {
		return false
	}
	b := int(uint64(key) % uint64(buckets))
	for _, sp := range o.spans {
		if b >= sp.first && b <= sp.last {
			return true
		}
	}
	return false
}

// predicate returns the condition "the row's key col is owned by the
// shard", or nil when the shard owns every row it can hold.
func (o *shardOwn) predicate(col clause.Column, buckets int) clause.Expression {
	if o.tmpl == nil { // not made by ownershipOf (tests): prepare a copy
		cp := *o
		cp.prepare(buckets)
		return cp.predicate(col, buckets)
	}
	if o.sql == "" {
		return nil
	}
	vars := make([]any, len(o.tmpl))
	copy(vars, o.tmpl)
	var c any = col
	for _, i := range o.cols {
		vars[i] = c
	}
	return clause.Expr{SQL: o.sql, Vars: vars}
}

// prepare computes the predicate's text and its variables, the key
// column's places left nil (cols): once per snapshot, so that a statement
// only fills in its table's column.
func (o *shardOwn) prepare(buckets int) {
	o.tmpl, o.cols, o.sql = []any{}, nil, ""
	if o.everything(buckets) {
		return
	}
	col := func() { o.cols = append(o.cols, len(o.tmpl)); o.tmpl = append(o.tmpl, nil) }
	var owned []string // AND terms: the rows of the shard's buckets
	if len(o.spans) > 0 {
		// NOT (the other buckets), not (its buckets): the same rows, but
		// PostgreSQL, which has no statistics on key % N, estimates a
		// range of it to hold 0.5 % of the rows and its negation most of
		// them, which is what a shard's own rows are; the first would
		// make it choose a sequential scan and a sort for an
		// ORDER BY ... LIMIT that an index serves.
		var rs []string
		next := 0
		for _, sp := range append(o.spans, bucketSpan{buckets, buckets}) {
			if sp.first > next { // buckets next..sp.first-1 are another shard's
				col()
				if next == sp.first-1 {
					rs = append(rs, "? % ? = ?")
					o.tmpl = append(o.tmpl, buckets, next)
				} else {
					rs = append(rs, "? % ? BETWEEN ? AND ?")
					o.tmpl = append(o.tmpl, buckets, next, sp.first-1)
				}
			}
			next = sp.last + 1
		}
		if len(rs) > 0 { // not every bucket
			owned = append(owned, "NOT ("+strings.Join(rs, " OR ")+")")
		}
	}
	if len(o.spans) > 0 && len(o.exclude) > 0 {
		owned = append(owned, "? NOT IN ?")
		col()
		o.tmpl = append(o.tmpl, o.exclude)
	}
	sql := strings.Join(owned, " AND ")
	if len(o.include) > 0 {
		if sql == "" { // no bucket (all buckets come with exclusions, so not all)
			sql = "? IN ?"
		} else {
			sql = "(" + sql + ") OR ? IN ?"
		}
		col()
		o.tmpl = append(o.tmpl, o.include)
	}
	if sql == "" {
		sql = "FALSE" // owns nothing
	}
	o.sql = "(" + sql + ")"
}

// ownedOnly decides whether the per-shard statements of a GORM read get
// the ownership predicate: with a shared map, a read that reaches shards
// not by its key alone (scatter, or several shards without a per-shard split
// of its key list), not pinned by a hint. For a read that accepts a lag
// the predicate follows the statement's placement (a bucket read from a
// move's target belongs to the target for it).
func (s *Sharding) ownedOnly(tg *target, scatter bool) {
	if s.fol == nil || tg.write || tg.raw || tg.pinned || tg.split >= 0 {
		return // raw SQL: see rawPending
	}
	if !scatter && (!tg.bounded || tg.mask&(tg.mask-1) == 0) {
		return // one shard: the owner of the statement's keys
	}
	tg.own = true
	rt := tg.pl.rt
	if tg.pl.lag != nil {
		lag := tg.pl.lag
		tg.ownLag = ownershipOf(len(rt.bucketShard), func(b int) int {
			if i, ok := lag[b]; ok {
				return i
			}
			return int(rt.bucketShard[b])
		}, rt.hot, rt.shards)
	}
}

// ownPredicate is the ownership predicate of shard si for tg's table, or
// nil.
func (tg *target) ownPredicate(si int) clause.Expression {
	own := tg.pl.rt.own
	if tg.ownLag != nil {
		own = tg.ownLag
	}
	return own[si].predicate(clause.Column{Table: clause.CurrentTable, Name: tg.t.Key}, len(tg.pl.rt.bucketShard))
}

// rawPending is the refusal of a raw SQL read over several shards whose
// text is the same on every shard, while the snapshot has a move that is
// neither done nor rolled back; "" otherwise.
func rawPending(tg *target) string {
	rt := tg.pl.rt
	if !tg.raw || tg.write || tg.rawParts != nil || rt.pending == 0 {
		return ""
	}
	moves := "1 bucket move"
	if rt.pending > 1 {
		moves = fmt.Sprintf("%d bucket moves", rt.pending)
	}
	return fmt.Sprintf("raw SQL over several shards while map version %d has %s in progress: rows of moving buckets may be on two shards, and raw SQL cannot be restricted to each shard's own buckets (use the GORM API, which restricts it, a shard key, or sharding.Shard)", rt.version, moves)
}
