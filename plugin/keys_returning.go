package plugin

import (
	"context"
	"slices"
	"strconv"

	"gorm.io/gorm"

	"github.com/freshread/freshread/classify"
)

// Keys the database assigns, read back with RETURNING: a raw INSERT ...
// VALUES that leaves its table's key to the database (a column left out,
// DEFAULT) and returns the key columns as plain items (`RETURNING id`,
// classify.Pinned.Returning) is keyed by the keys it returned. Outside a
// transaction its whole result is read before the write is published
// (row_write.go), so the keys are in hand then; the names raised are the
// ones an INSERT listing those keys would raise, and the rows returned are
// exactly the rows written (RETURNING shows each row as stored, after
// triggers). A result that failed, or whose columns are not the items the
// statement lists, raises the table.

// returnedKeys is how a raw INSERT is keyed from its result: the
// statement's pins, its table's key and signature, and the result column
// of each key column.
type returnedKeys struct {
	c    rawClass
	pk   *keyDef
	sig  string
	cols []int
	vars []any
}

// returnedKeysKey keys, in Statement.Settings, the returnedKeys of a raw
// write whose names its result decides.
type returnedKeysKey struct{ stmt *gorm.Statement }

// returningPlan reports how a raw write classified as c is keyed from its
// result, when it is an INSERT whose VALUES do not prove its keys and
// whose RETURNING lists every key column.
func (p *Plugin) returningPlan(ctx context.Context, c rawClass, vars []any) (returnedKeys, bool) {
	pn := c.pinned
	if !p.cfg.keyed() || pn == nil || pn.Rows == 0 || len(pn.Returning) == 0 || len(c.writes) != 1 {
		return returnedKeys{}, false
	}
	table := c.writes[0]
	tn := p.tableNames(table)
	pk, ok := p.knownKey(tn, table)
	if !ok {
		return returnedKeys{}, false
	}
	vars = placeholderArgs(vars)
	if _, proven := p.rawPinnedKeys(pn, pk, vars); proven {
		return returnedKeys{}, false // the VALUES name the keys
	}
	plan := returnedKeys{c: c, pk: pk, vars: vars}
	for _, col := range pk.cols {
		at := slices.IndexFunc(pn.Returning, func(item string) bool { return item != "" && p.sameRawColumn(item, col) })
		if at < 0 {
			return returnedKeys{}, false
		}
		plan.cols = append(plan.cols, at)
	}
	plan.sig = p.signatureOf(tn, table, pk)
	if !p.keysAgreed(ctx, tn, table, plan.sig) {
		return returnedKeys{}, false
	}
	return plan, true
}

// recordReturned records the write of a statement keyed from its result
// (returningPlan), now that res is read.
func (p *Plugin) recordReturned(db *gorm.DB, res *bufferedResult) {
	if v, ok := db.Statement.Settings.LoadAndDelete(returnedKeysKey{db.Statement}); ok {
		p.recordWrite(db, p.namesFrom(v.(returnedKeys), res))
	}
}

// namesFrom returns the names the write raises given its result: those
// of an INSERT that listed the keys returned, or the table.
func (p *Plugin) namesFrom(plan returnedKeys, res *bufferedResult) []string {
	pn := plan.c.pinned
	if res.err != nil || len(res.cols) != len(pn.Returning) || len(res.rows) == 0 || len(res.rows) > maxKeys {
		return plan.c.writes
	}
	// The returned keys become arguments of pins put before the
	// statement's own: rawPinnedKeys reads a column's first pin.
	vars := slices.Clone(plan.vars)
	listed := classify.Pinned{Table: pn.Table, Rows: len(res.rows), Upsert: pn.Upsert}
	for i, col := range plan.pk.cols {
		pin := classify.Pin{Column: col}
		for _, row := range res.rows {
			v, ok := returnedValue(plan.pk.types[i], row[plan.cols[i]])
			if !ok {
				return plan.c.writes
			}
			vars = append(vars, v)
			pin.Values = append(pin.Values, classify.Value{Param: len(vars)})
		}
		listed.Pins = append(listed.Pins, pin)
	}
	listed.Pins = append(listed.Pins, pn.Pins...)
	if names, ok := p.pinnedWriteNames(&listed, plan.c.writes[0], plan.pk, plan.sig, vars); ok {
		return names
	}
	return plan.c.writes
}

// returnedValue is a value a driver returned for a key column of type t,
// as the Go value the key's canonical form is taken from: text and
// integers a driver returns as bytes (MySQL's text protocol) become a
// string and an int64.
func returnedValue(t keyType, v any) (any, bool) {
	b, ok := v.([]byte)
	if !ok {
		return v, v != nil
	}
	if t.kind == kindInt {
		n, err := strconv.ParseInt(string(b), 10, 64)
		return n, err == nil
	}
	return string(b), true
}
