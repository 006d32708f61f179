package sharding

import (
	"context"
	"fmt"
	"reflect"
	"runtime"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/freshread/freshread/sharding/internal/sqltext"
)

// checkAssociations refuses, before anything is written, a Create or
// Update whose associations GORM would save through the shard's own
// callbacks (Create or Save of an order with its items, nested at any
// depth, and the association API's Append and Replace): there they would
// be written on the parent row's shard whatever their table and keys. An
// association on a sharded table whose rows carry keys of the parent's
// shard is allowed; a table of the default database, a many-to-many join
// table, a row without a key or with another shard's key are not. So is
// a Replace of a has-one or has-many outside a session pinned to the
// shard (Sharding.ForUser): GORM then unlinks the old rows by their
// foreign key alone, a statement without the shard key.
//
// GORM saves the associated rows through the shard's own callbacks, not
// the router: so a row of a table with an ID column gets here the ID the
// router would mint for it (Config.IDs), and the lookup pairs of rows of
// a table with Table.Lookup are returned, per table, for execute to write
// before the statement runs.
func (s *Sharding) checkAssociations(db *gorm.DB, tg *target) (map[string][]Pair, error) {
	stmt := db.Statement
	if tg.t == nil || tg.raw || (tg.op != opCreate && tg.op != opUpdate) || stmt.Schema == nil || len(stmt.Schema.Relationships.Relations) == 0 {
		return nil, nil
	}
	ctx := stmt.Context
	create := tg.op == opCreate
	sel, restricted := stmt.SelectAndOmitColumns(create, !create)
	saved := func(rel *schema.Relationship) bool {
		v, ok := sel[rel.Name]
		return !((ok && !v) || (!ok && restricted))
	}
	keyField := stmt.Schema.LookUpField(tg.t.Key)
	var pairs map[string][]Pair
	for _, row := range elements(stmt.ReflectValue) {
		if row.Kind() != reflect.Struct {
			continue
		}
		parent := tg.singleShard()
		if key, ok := rowValue(ctx, row, keyField, tg.t.Key); ok && key > 0 {
			parent = tg.pl.key(key)
		} else if tg.mask&(tg.mask-1) != 0 {
			if savesAny(ctx, stmt.Schema, row, saved) {
				return nil, fmt.Errorf("%w: %s on %q with associations over several shards", ErrCrossShard, tg.op, tg.t.Name)
			}
			continue
		}
		ac := assocCheck{s: s, tg: tg, ctx: ctx, parent: parent, pairs: pairs}
		if err := ac.row(stmt.Schema, row, saved, 0); err != nil {
			return nil, err
		}
		pairs = ac.pairs
		if ac.replaced && !tg.pinned && inAssociationReplace() {
			return nil, fmt.Errorf("%w: Association(%q).Replace on %q unlinks the old rows by their foreign key alone, without %s: run it on Sharding.ForUser(db, userID)", ErrNoShardKey, ac.replacedName, tg.t.Name, ac.replacedKey)
		}
	}
	return pairs, nil
}

// maxAssociationDepth bounds the walk of nested associations (a
// self-reference may point back at its parent).
const maxAssociationDepth = 32

// assocCheck walks the associations GORM saves with one row.
type assocCheck struct {
	s      *Sharding
	tg     *target
	ctx    context.Context
	parent int // the shard every associated row must be on
	// replaced: a has-one or has-many of a sharded table is saved (what
	// an Association Replace unlinks the old rows of).
	replaced                  bool
	replacedName, replacedKey string
	// pairs: the lookup pairs of the associated rows, per table.
	pairs map[string][]Pair
}

// row checks the associations of row (of schema sch) that saved selects.
func (ac *assocCheck) row(sch *schema.Schema, row reflect.Value, saved func(*schema.Relationship) bool, depth int) error {
	if depth > maxAssociationDepth {
		return fmt.Errorf("%w: associations of %q nested deeper than %d", ErrCrossShard, sch.Table, maxAssociationDepth)
	}
	for _, rel := range sch.Relationships.Relations {
		if rel.Schema == nil || rel.Schema.ModelType != sch.ModelType {
			// GORM lists in a model's relations the other model's has-many
			// or has-one of it ("_Order_Items"), whose field is the other
			// model's: GORM does not save it with this row.
			continue
		}
		if saved != nil && !saved(rel) {
			continue
		}
		val, zero := rel.Field.ValueOf(ac.ctx, row)
		if zero {
			continue
		}
		t2 := ac.s.tables[sqltext.NormalizeTable(rel.FieldSchema.Table)]
		if t2 == nil || rel.Type == schema.Many2Many {
			return fmt.Errorf("%w: %s on %q would save its association %s (table %q) on the shard: save it with its own statement, or Omit(clause.Associations)", ErrCrossShard, ac.tg.op, ac.tg.t.Name, rel.Name, rel.FieldSchema.Table)
		}
		if depth == 0 && (rel.Type == schema.HasMany || rel.Type == schema.HasOne) {
			ac.replaced, ac.replacedName, ac.replacedKey = true, rel.Name, t2.Key
		}
		f2 := rel.FieldSchema.LookUpField(t2.Key)
		for _, el := range elements(reflect.ValueOf(val)) {
			if el.Kind() != reflect.Struct {
				continue
			}
			key, ok := rowValue(ac.ctx, el, f2, t2.Key)
			if !ok || key <= 0 {
				return fmt.Errorf("%w: association %s of %q has a row without %s", ErrNoShardKey, rel.Name, sch.Table, t2.Key)
			}
			if si := ac.tg.pl.key(key); si != ac.parent {
				return fmt.Errorf("%w: association %s of %q has a row of %s %d on shard %q, its parent is on %q", ErrCrossShard, rel.Name, sch.Table, t2.Key, key, ac.s.shards[si].name, ac.s.shards[ac.parent].name)
			}
			if err := ac.rowID(rel, t2, el, key); err != nil {
				return err
			}
			// GORM saves the row's own associations with it.
			if err := ac.row(rel.FieldSchema, el, nil, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// rowID gives an associated row of a table with an ID column what the
// router gives a created row: a minted ID when it has none, its lookup
// pair. A given ID minted for another shard is refused.
func (ac *assocCheck) rowID(rel *schema.Relationship, t2 *tableInfo, el reflect.Value, key int64) error {
	if t2.ID == "" {
		return nil
	}
	s := ac.s
	idField := rel.FieldSchema.LookUpField(t2.ID)
	id, _ := rowValue(ac.ctx, el, idField, t2.ID)
	switch {
	case id == 0 && s.cfg.IDs != nil:
		var err error
		if id, err = s.cfg.IDs.Next(s.routeCode(ac.tg.pl.rt, key)); err != nil {
			return fmt.Errorf("sharding: mint an ID for %q: %w", t2.Name, err)
		}
		if err := setRowValue(ac.ctx, el, idField, t2.ID, id); err != nil {
			return err
		}
	case id != 0:
		if si, ok := ac.tg.pl.minted(id); ok && si != ac.parent {
			return fmt.Errorf("%w: association %s of %q has a row of %s %d, an ID of shard %q, its parent is on %q", ErrShardKeyChange, rel.Name, ac.tg.t.Name, t2.ID, id, s.shards[si].name, s.shards[ac.parent].name)
		}
	}
	if !t2.Lookup {
		return nil
	}
	if id == 0 {
		return fmt.Errorf("%w: association %s of %q has a row without %s, which the lookup must record: give it one, or set Config.IDs", ErrNoShardKey, rel.Name, ac.tg.t.Name, t2.ID)
	}
	if ac.pairs == nil {
		ac.pairs = map[string][]Pair{}
	}
	ac.pairs[t2.Name] = append(ac.pairs[t2.Name], Pair{OrderID: id, UserID: key})
	return nil
}

// savesAny reports whether GORM would save any association with row.
func savesAny(ctx context.Context, sch *schema.Schema, row reflect.Value, saved func(*schema.Relationship) bool) bool {
	for _, rel := range sch.Relationships.Relations {
		if rel.Schema == nil || rel.Schema.ModelType != sch.ModelType || !saved(rel) {
			continue
		}
		if _, zero := rel.Field.ValueOf(ctx, row); !zero {
			return true
		}
	}
	return false
}

// elements is v's rows: the elements of a slice or array, or v itself,
// pointers followed.
func elements(v reflect.Value) []reflect.Value {
	v = reflect.Indirect(v)
	switch v.Kind() {
	case reflect.Slice, reflect.Array:
		out := make([]reflect.Value, 0, v.Len())
		for i := 0; i < v.Len(); i++ {
			out = append(out, reflect.Indirect(v.Index(i)))
		}
		return out
	case reflect.Invalid:
		return nil
	}
	return []reflect.Value{v}
}

// inAssociationReplace reports whether GORM's Association Replace is
// saving the statement's associations (read from the call stack).
func inAssociationReplace() bool {
	var pcs [48]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs[:])])
	for {
		f, more := frames.Next()
		if f.Function == "gorm.io/gorm.(*Association).Replace" {
			return true
		}
		if !more {
			return false
		}
	}
}
