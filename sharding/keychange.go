package sharding

import (
	"context"
	"fmt"
	"math/bits"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/freshread/freshread/sharding/internal/sqltext"
)

// Rows never move between shards: a write that may change a stored row's
// shard key, or store a second copy of a row whose ID lives on another
// shard, is refused with ErrShardKeyChange before anything is sent
// (docs/design/sharding-and-moves.md, "Changing a row's shard key").
//
// An assignment of the key is allowed only when the plugin can prove the
// key keeps its value on every row the statement can write: the value is
// a constant, the statement runs on one shard, the value's shard is that
// shard, and either the condition names the key with that value only, or
// it names the rows' IDs and each ID's row has that key (the lookup's
// user, or, for a minted ID the lookup does not know, the ID's route code
// is the value's: then the row, its ID and its placement stay consistent
// through every bucket move).

// givenRow is a row a Create was given with its own ID, and the shard
// the Create writes it on.
type givenRow struct {
	id, key int64
	shard   int
}

// keyAssign is what a statement assigns to the shard key.
type keyAssign struct {
	assigned bool
	constant bool // value is known
	value    int64
}

// checkKeyChange refuses, before anything is written, a write of tg that
// may change a row's shard key or duplicate a row on another shard.
func (s *Sharding) checkKeyChange(db *gorm.DB, tg *target) error {
	if tg.t == nil || !tg.write {
		return nil
	}
	stmt := db.Statement
	switch {
	case tg.create != nil:
		if err := s.checkGivenMinted(tg); err != nil {
			return err
		}
		return s.checkUpsert(db, tg)
	case tg.raw:
		a, upsert := rawKeyAssign(stmt.SQL.String(), stmt.Vars, tg.t.matcher(false))
		if upsert {
			return keyChangeErr(tg, "an upsert's update assigns %s (the conflicting row is unknown)", tg.t.Key)
		}
		return s.checkUpdateKey(db, tg, a)
	case tg.op == opUpdate:
		return s.checkUpdateKey(db, tg, gormKeyAssign(stmt, tg.t))
	}
	return nil
}

func keyChangeErr(tg *target, format string, args ...any) error {
	return fmt.Errorf("%w: %s on %q: %s; rows do not move between shards: delete the row and create it for the new user",
		ErrShardKeyChange, tg.op, tg.t.Name, fmt.Sprintf(format, args...))
}

// checkUpdateKey allows an UPDATE's assignment a of the key only when the
// key provably keeps its value (see above).
func (s *Sharding) checkUpdateKey(db *gorm.DB, tg *target, a keyAssign) error {
	t := tg.t
	switch {
	case !a.assigned:
		return nil
	case !a.constant:
		return keyChangeErr(tg, "assigns %s a value that is not a constant", t.Key)
	case !tg.bounded || bits.OnesCount64(tg.mask) != 1:
		return keyChangeErr(tg, "sets %s = %d on shards %v", t.Key, a.value, s.names(tg.mask, tg.bounded))
	}
	si := tg.singleShard()
	if to := tg.pl.key(a.value); to != si {
		return keyChangeErr(tg, "sets %s = %d, whose shard is %q, on rows of shard %q", t.Key, a.value, s.shards[to].name, s.shards[si].name)
	}
	c := tg.cond
	if c == nil {
		c, _, _ = whereCond(db, tg)
	}
	if keys, ok := pinnedValues(c, colKey); ok {
		for _, k := range keys {
			if k != a.value {
				return keyChangeErr(tg, "changes %s from %d to %d", t.Key, k, a.value)
			}
		}
		return nil
	}
	ids, ok := pinnedValues(c, colID)
	if !ok {
		return keyChangeErr(tg, "sets %s = %d on rows the condition names neither by %s nor by ID", t.Key, a.value, t.Key)
	}
	owners, err := s.knownOwners(db.Statement.Context, t, ids)
	if err != nil {
		return fmt.Errorf("sharding: %s on %q: read the users of the updated orders: %w", tg.op, t.Name, err)
	}
	for _, id := range ids {
		if !s.keyFits(tg.pl.rt, owners, id, a.value) {
			return keyChangeErr(tg, "sets %s = %d on order %d, which belongs to another %s", t.Key, a.value, id, t.Key)
		}
	}
	return nil
}

// checkGivenMinted refuses a Create given a minted ID that was minted for
// another key's route: stored under this key, the row would be looked for
// by its ID on the shard of the ID's route, now or after a bucket move
// (a minted ID is routed by its bits, never through the lookup, on a
// lookup table too), and an order of that ID may exist there already.
// It needs no round trip.
func (s *Sharding) checkGivenMinted(tg *target) error {
	if s.cfg.IDs == nil {
		return nil
	}
	for _, g := range tg.create.given {
		if IsMinted(g.id) && !s.keyFits(tg.pl.rt, nil, g.id, g.key) {
			return keyChangeErr(tg, "order %d was minted for another %s than %d: stored under it, it would be looked for elsewhere by its ID (mint IDs with the row's own key, or leave the ID zero)", g.id, tg.t.Key, g.key)
		}
	}
	return nil
}

// checkUpsert refuses a Create with ON CONFLICT (an upsert, Save of a
// slice, Save's insert after an update that matched nothing) that is
// given a row whose ID lives on another shard than the row's key (it
// would store a second row with that ID), or whose update assigns the key
// of a conflicting row that may have another key.
func (s *Sharding) checkUpsert(db *gorm.DB, tg *target) error {
	stmt := db.Statement
	oc, ok := stmt.Clauses["ON CONFLICT"].Expression.(clause.OnConflict)
	if !ok {
		return nil
	}
	t := tg.t
	assigns := oc.UpdateAll
	for _, a := range oc.DoUpdates {
		if strings.EqualFold(a.Column.Name, t.Key) {
			assigns = true
		}
	}
	// The conflicting row is the one with the row's ID when the target is
	// the ID (GORM's default target is the primary key).
	byID := t.ID != "" && oc.OnConstraint == "" &&
		((len(oc.Columns) == 0 && stmt.Schema != nil && stmt.Schema.PrioritizedPrimaryField != nil &&
			strings.EqualFold(stmt.Schema.PrioritizedPrimaryField.DBName, t.ID)) ||
			(len(oc.Columns) == 1 && strings.EqualFold(oc.Columns[0].Name, t.ID)))
	if assigns && !byID {
		return keyChangeErr(tg, "an upsert whose conflict target is not %q assigns %s", t.ID, t.Key)
	}
	given := tg.create.given
	if len(given) == 0 {
		return nil
	}
	ids := make([]int64, len(given))
	for i, g := range given {
		ids[i] = g.id
	}
	owners, err := s.knownOwners(stmt.Context, t, ids)
	if err != nil {
		return fmt.Errorf("sharding: %s on %q: read the users of the upserted orders: %w", tg.op, t.Name, err)
	}
	for _, g := range given {
		home, known := 0, false
		if u, ok := owners[g.id]; ok {
			home, known = tg.pl.key(u), true
		} else {
			home, known = tg.pl.minted(g.id)
		}
		if known && home != g.shard {
			return keyChangeErr(tg, "order %d lives on shard %q, the row's %s %d on %q", g.id, s.shards[home].name, t.Key, g.key, s.shards[g.shard].name)
		}
		if known && assigns && !s.keyFits(tg.pl.rt, owners, g.id, g.key) {
			return keyChangeErr(tg, "an upsert would set %s = %d on order %d, which belongs to another %s", t.Key, g.key, g.id, t.Key)
		}
	}
	return nil
}

// knownOwners asks the lookup for the users of ids: the IDs that were not
// minted, and minted ones too on a table whose lookup records them.
func (s *Sharding) knownOwners(ctx context.Context, t *tableInfo, ids []int64) (map[int64]int64, error) {
	if s.cfg.Lookup == nil {
		return nil, nil
	}
	var ask []int64
	for _, id := range ids {
		if t.Lookup || !IsMinted(id) {
			ask = append(ask, id)
		}
	}
	if len(ask) == 0 {
		return nil, nil
	}
	return s.cfg.Lookup.Resolve(ctx, ask)
}

// keyFits reports whether the row of order id provably keeps its
// placement with shard key key: the lookup names that user, or the lookup
// does not know the minted ID and its route code is key's.
func (s *Sharding) keyFits(rt *routing, owners map[int64]int64, id, key int64) bool {
	if u, ok := owners[id]; ok {
		return u == key
	}
	if IsMinted(id) {
		return int((id>>idRouteShift)&routeMask) == s.routeCode(rt, key)
	}
	return false
}

// pinnedValues returns the values of the first leaf on column col among
// the members of c's top-level AND: every row c matches has one of them.
func pinnedValues(c *cond, col int) ([]int64, bool) {
	switch c.op {
	case opLeaf:
		if c.column == col {
			return c.values, true
		}
	case opAnd:
		for _, k := range c.kids {
			if v, ok := pinnedValues(k, col); ok {
				return v, true
			}
		}
	}
	return nil, false
}

// assignOf reads an assigned value.
func assignOf(v any) keyAssign {
	switch v.(type) {
	case clause.Expression, *gorm.DB:
		return keyAssign{assigned: true}
	}
	n, ok := intValue(v)
	return keyAssign{assigned: true, constant: ok, value: n}
}

// gormKeyAssign returns what a GORM Update assigns to t's key, read from
// its destination as GORM's update callback builds the SET clause from
// it (a map, or a struct's selected or non-zero fields), or from a SET
// clause the statement carries.
func gormKeyAssign(stmt *gorm.Statement, t *tableInfo) keyAssign {
	if set, ok := stmt.Clauses["SET"].Expression.(clause.Set); ok {
		for _, a := range set {
			if strings.EqualFold(a.Column.Name, t.Key) {
				return assignOf(a.Value)
			}
		}
		return keyAssign{}
	}
	sel, restricted := stmt.SelectAndOmitColumns(false, true)
	dest := reflect.ValueOf(stmt.Dest)
	for dest.Kind() == reflect.Pointer && !dest.IsNil() {
		dest = dest.Elem()
	}
	switch dest.Kind() {
	case reflect.Map:
		m, ok := dest.Interface().(map[string]any)
		if !ok {
			return keyAssign{}
		}
		for k, v := range m {
			col := k
			if stmt.Schema != nil {
				if f := stmt.Schema.LookUpField(k); f != nil {
					col = f.DBName
				}
			}
			if !strings.EqualFold(col, t.Key) {
				continue
			}
			if s, ok := sel[col]; (ok && s) || (!ok && !restricted) {
				return assignOf(v)
			}
		}
	case reflect.Struct:
		sch := stmt.Schema
		if sch == nil || dest.Type() != sch.ModelType {
			var err error
			if sch, err = schema.Parse(stmt.Dest, &sync.Map{}, stmt.NamingStrategy); err != nil {
				return keyAssign{assigned: true} // unknown: not provably unchanged
			}
		}
		f := sch.LookUpField(t.Key)
		if f == nil || !f.Updatable {
			return keyAssign{}
		}
		s, ok := sel[f.DBName]
		if !((ok && s) || (!ok && !restricted)) {
			return keyAssign{}
		}
		v, zero := f.ValueOf(stmt.Context, dest)
		if !ok && zero {
			return keyAssign{}
		}
		return assignOf(v)
	}
	return keyAssign{}
}

// rawKeyAssign reads what a raw statement assigns to the key column
// (match's colKey): in an UPDATE's SET list, and whether an upsert's
// update (ON CONFLICT ... DO UPDATE SET, ON DUPLICATE KEY UPDATE) assigns
// it. Every SET list of the text is read, at any depth (an UPDATE in a
// WITH); an assignment of the key other than "key = constant" (a tuple,
// an expression) is not a constant.
func rawKeyAssign(sql string, vars []any, match columnMatcher) (upd keyAssign, upsert bool) {
	toks := sqltext.Lex(sql)
	qmarks := make([]int, len(toks)) // "?" before each token
	depth := make([]int, len(toks))
	q, d := 0, 0
	for i, t := range toks {
		if t.IsOp(")") {
			d--
		}
		qmarks[i], depth[i] = q, d
		if t.IsOp("(") {
			d++
		}
		if t.Kind == sqltext.Param && t.Param < 0 {
			q++
		}
	}
	for i, t := range toks {
		var inUpsert bool
		switch {
		case t.Is("set"):
			inUpsert = i >= 2 && toks[i-1].Is("update") && toks[i-2].Is("do")
		case t.Is("update") && i >= 1 && toks[i-1].Is("key"):
			inUpsert = true
		default:
			continue
		}
		// The assignments: up to the end of the enclosing parentheses or
		// the next clause at this depth, split at this depth's commas.
		start := i + 1
		for j := start; j <= len(toks); j++ {
			end := j == len(toks)
			if !end {
				u := toks[j]
				end = depth[j] < depth[i] || (depth[j] == depth[i] &&
					(u.IsOp(",") || u.IsOp(";") || u.Is("where") || u.Is("from") || u.Is("returning")))
			}
			if !end {
				continue
			}
			a := rawAssignment(toks[start:j], depth[i], depth[start:j], qmarks[start:j], vars, match)
			if a.assigned {
				if inUpsert {
					upsert = true
				} else if upd.assigned {
					upd = keyAssign{assigned: true} // assigned twice
				} else {
					upd = a
				}
			}
			if j == len(toks) || !toks[j].IsOp(",") || depth[j] != depth[i] {
				break
			}
			start = j + 1
		}
	}
	return upd, upsert
}

// rawAssignment reads one "left = right" item of a SET list.
func rawAssignment(ts []sqltext.Tok, d int, depth, qmarks []int, vars []any, match columnMatcher) keyAssign {
	eq := -1
	for k, t := range ts {
		if t.IsOp("=") && depth[k] == d {
			eq = k
			break
		}
	}
	if eq < 0 {
		return keyAssign{}
	}
	hit := false
	for _, t := range ts[:eq] {
		if t.Kind == sqltext.Ident && match(t.Text) == colKey {
			hit = true
		}
	}
	if !hit {
		return keyAssign{}
	}
	if eq != 1 || len(ts) != 3 {
		return keyAssign{assigned: true}
	}
	switch r := ts[2]; r.Kind {
	case sqltext.Number, sqltext.String:
		n, err := strconv.ParseInt(r.Text, 10, 64)
		return keyAssign{assigned: true, constant: err == nil, value: n}
	case sqltext.Param:
		idx := r.Param
		if idx < 0 {
			idx = qmarks[2]
		}
		if idx >= 0 && idx < len(vars) {
			return assignOf(vars[idx])
		}
	}
	return keyAssign{assigned: true}
}
