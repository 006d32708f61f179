package sharding

import (
	"fmt"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/freshread/freshread/sharding/internal/sqltext"
)

// checkAssociations refuses, before anything is written, a Create or
// Update whose associations GORM would save through the shard's own
// callbacks (Create or Save of an order with its items): there they would
// be written on the parent row's shard whatever their table and keys. An
// association on a sharded table whose rows carry keys of the parent's
// shard is allowed; a table of the default database, a many-to-many join
// table, a row without a key or with another shard's key are not.
func (s *Sharding) checkAssociations(db *gorm.DB, tg *target) error {
	stmt := db.Statement
	if tg.t == nil || tg.raw || (tg.op != opCreate && tg.op != opUpdate) || stmt.Schema == nil || len(stmt.Schema.Relationships.Relations) == 0 {
		return nil
	}
	ctx := stmt.Context
	create := tg.op == opCreate
	sel, restricted := stmt.SelectAndOmitColumns(create, !create)
	var rows []reflect.Value
	switch rv := reflect.Indirect(stmt.ReflectValue); rv.Kind() {
	case reflect.Slice, reflect.Array:
		for i := 0; i < rv.Len(); i++ {
			rows = append(rows, reflect.Indirect(rv.Index(i)))
		}
	case reflect.Struct:
		rows = []reflect.Value{rv}
	}
	keyField := stmt.Schema.LookUpField(tg.t.Key)
	for _, rel := range stmt.Schema.Relationships.Relations {
		if v, ok := sel[rel.Name]; (ok && !v) || (!ok && restricted) {
			continue
		}
		for _, row := range rows {
			if row.Kind() != reflect.Struct {
				continue
			}
			val, zero := rel.Field.ValueOf(ctx, row)
			if zero {
				continue
			}
			t2 := s.tables[sqltext.NormalizeTable(rel.FieldSchema.Table)]
			if t2 == nil || rel.Type == schema.Many2Many {
				return fmt.Errorf("%w: %s on %q would save its association %s (table %q) on the shard: save it with its own statement, or Omit(clause.Associations)", ErrCrossShard, tg.op, tg.t.Name, rel.Name, rel.FieldSchema.Table)
			}
			parent := tg.singleShard()
			if key, ok := rowValue(ctx, row, keyField, tg.t.Key); ok && key > 0 {
				parent = tg.pl.key(key)
			} else if tg.mask&(tg.mask-1) != 0 {
				return fmt.Errorf("%w: %s on %q with association %s over several shards", ErrCrossShard, tg.op, tg.t.Name, rel.Name)
			}
			f2 := rel.FieldSchema.LookUpField(t2.Key)
			var elems []reflect.Value
			switch ev := reflect.Indirect(reflect.ValueOf(val)); ev.Kind() {
			case reflect.Slice, reflect.Array:
				for i := 0; i < ev.Len(); i++ {
					elems = append(elems, reflect.Indirect(ev.Index(i)))
				}
			default:
				elems = []reflect.Value{ev}
			}
			for _, el := range elems {
				key, ok := rowValue(ctx, el, f2, t2.Key)
				if !ok || key <= 0 {
					return fmt.Errorf("%w: association %s of %q has a row without %s", ErrNoShardKey, rel.Name, tg.t.Name, t2.Key)
				}
				if si := tg.pl.key(key); si != parent {
					return fmt.Errorf("%w: association %s of %q has a row of %s %d on shard %q, its parent is on %q", ErrCrossShard, rel.Name, tg.t.Name, t2.Key, key, s.shards[si].name, s.shards[parent].name)
				}
			}
		}
	}
	return nil
}
