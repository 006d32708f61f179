package plugin

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/freshread/freshread/classify"
)

// Keyed positions for raw SQL: the classifier reports which columns a
// single-table statement's WHERE pins, or an INSERT's VALUES list
// (classify.Pinned); a column is a key when it is a column of the table's
// primary key (the one the plugin has seen the table's model use, else
// the catalog's: knownKey), or one of Config.KeyColumns. Placeholder values come from the statement's
// arguments. GORM statements without a model (db.Table) are keyed the same
// way, from the SQL GORM builds (keys_table.go).

// rawKeyedReadNames returns the names a raw read of table pinned to key
// values needs, or ok false (the read needs the table position).
func (p *Plugin) rawKeyedReadNames(ctx context.Context, pn *classify.Pinned, table string, vars []any) ([]string, bool) {
	if pn == nil || len(pn.Pins) == 0 {
		return nil, false
	}
	vars = placeholderArgs(vars)
	tn := p.tableNames(table)
	pk, ok := p.knownKey(tn, table)
	if !ok {
		// Without the primary key the signature is unknown (and
		// claiming one without it would set the table's apart from
		// every process that knows it): by table.
		return nil, false
	}
	if keys, ok := p.rawPinnedKeys(pn, pk, vars); ok {
		return p.agreedReadNames(ctx, tn, table, pk, pk.name, keys)
	}
	for _, col := range p.cfg.KeyColumns[table] {
		if keys, ok := p.rawPinnedColumn(pn, col, keyInt, vars); ok {
			return p.agreedReadNames(ctx, tn, table, pk, col, keys)
		}
	}
	return nil, false
}

// rawWriteNames returns the names a raw write classified as c raises: the
// keyed names when it is a single-table UPDATE or DELETE whose WHERE pins
// a key column, or an INSERT ... VALUES that lists one's values
// (classify.Pinned), c.writes otherwise.
func (p *Plugin) rawWriteNames(ctx context.Context, c rawClass, vars []any) []string {
	if !p.cfg.keyed() || c.pinned == nil || len(c.writes) != 1 {
		return c.writes
	}
	table := c.writes[0]
	tn := p.tableNames(table)
	pk, ok := p.knownKey(tn, table)
	if !ok {
		// Without the primary key, the write could not raise its
		// column's unkeyed position for reads pinned to it: by table.
		return c.writes
	}
	sig := p.signatureOf(tn, table, pk)
	if !p.keysAgreed(ctx, tn, table, sig) {
		return c.writes
	}
	if names, ok := p.pinnedWriteNames(c.pinned, table, pk, sig, vars); ok {
		return names
	}
	return c.writes
}

// pinnedWriteNames returns the names a single-table UPDATE or DELETE of
// table whose WHERE pins pn, or an INSERT whose VALUES do, raises, by a
// process keying table by signature sig with primary key pk, or ok false
// when it proves no key column (the caller raises the table). A key
// column an INSERT does not pin (left out of its column list: the
// database assigns it; or given anything but a value) raises its unkeyed
// position.
func (p *Plugin) pinnedWriteNames(pn *classify.Pinned, table string, pk *keyDef, sig string, vars []any) ([]string, bool) {
	vars = placeholderArgs(vars)
	var kw keyedWrite
	keys, ok := p.rawPinnedKeys(pn, pk, vars)
	for _, col := range pk.cols {
		if ok && p.rawAssigns(pn, col) {
			ok = false // the row moves to another key
		}
	}
	kw.add(table, pk.name, keys, ok)
	pkCol, _ := pk.single()
	for _, col := range p.cfg.KeyColumns[table] {
		if strings.EqualFold(col, pkCol) {
			continue
		}
		keys, ok := p.rawPinnedColumn(pn, col, keyInt, vars)
		if ok && p.rawAssigns(pn, col) {
			var v string
			if v, ok = p.rawAssigned(pn, col, keyInt, vars); ok {
				keys = append(keys, v)
			}
		}
		kw.add(table, col, keys, ok)
	}
	return kw.result(p.signedTable(table, sig))
}

// sameRawColumn reports whether a column named in SQL is col: exactly on
// PostgreSQL (an unquoted name arrives lower-cased, a quoted one keeps its
// case), ignoring case on MySQL.
func (p *Plugin) sameRawColumn(sqlName, col string) bool {
	if p.classifier.Dialect() == classify.MySQL {
		return strings.EqualFold(sqlName, col)
	}
	return sqlName == col
}

// rawPinnedKeys returns the canonical forms of the values of key k that
// pn pins. A composite key is pinned only when each of its columns is
// pinned to exactly one value, or, in an INSERT, to one value in each
// row: a key is a row's forms joined by "," in the key's order.
func (p *Plugin) rawPinnedKeys(pn *classify.Pinned, k *keyDef, vars []any) ([]string, bool) {
	if col, ok := k.single(); ok {
		return p.rawPinnedColumn(pn, col, k.types[0], vars)
	}
	rows := max(pn.Rows, 1)
	cols := make([][]string, len(k.cols))
	for i, col := range k.cols {
		v, ok := p.rawPinnedColumn(pn, col, k.types[i], vars)
		if !ok || len(v) != rows {
			return nil, false
		}
		cols[i] = v
	}
	keys := make([]string, rows)
	for r := range keys {
		var key strings.Builder
		for i := range cols {
			if i > 0 {
				key.WriteByte(',')
			}
			key.WriteString(cols[i][r])
		}
		keys[r] = key.String()
	}
	return keys, true
}

// rawPinnedColumn returns the canonical forms, as values of type t, of
// the values the first pin of col holds.
func (p *Plugin) rawPinnedColumn(pn *classify.Pinned, col string, t keyType, vars []any) ([]string, bool) {
	if pn.Upsert && (t.kind == kindText || t.kind == kindTextPad) {
		// A unique index on the column under another collation may be
		// the arbiter: the row DO UPDATE updates may name another text.
		return nil, false
	}
	for _, pin := range pn.Pins {
		if !p.sameRawColumn(pin.Column, col) {
			continue
		}
		var keys []string
		for _, v := range pin.Values {
			if v.Array {
				if v.Param > len(vars) {
					return nil, false
				}
				ks, ok := keyValues(t, flatten(vars[v.Param-1]))
				if !ok {
					return nil, false
				}
				keys = append(keys, ks...)
				continue
			}
			k, ok := rawValue(v, t, vars)
			if !ok || pn.Rows > 0 && !p.storedAsGiven(t, k) {
				return nil, false
			}
			keys = append(keys, k)
		}
		return keys, len(keys) > 0 && len(keys) <= maxKeys
	}
	return nil, false
}

// storedAsGiven reports whether an INSERT stores the value of canonical
// form k of type t as given: MariaDB and MySQL store the next
// AUTO_INCREMENT value instead of an integer 0 (unless the sql_mode has
// NO_AUTO_VALUE_ON_ZERO, which the plugin does not read).
func (p *Plugin) storedAsGiven(t keyType, k string) bool {
	return !(t.kind == kindInt && k == "0" && p.classifier.Dialect() == classify.MySQL)
}

// rawAssigns reports whether an UPDATE assigns col.
func (p *Plugin) rawAssigns(pn *classify.Pinned, col string) bool {
	for _, s := range pn.Sets {
		if p.sameRawColumn(s.Column, col) {
			return true
		}
	}
	return false
}

// rawAssigned is the canonical form of the value of type t an UPDATE
// assigns to col, when known: col assigned once (MySQL applies several
// assignments of one column in order, each seeing the one before: `SET
// item_id = 5, parts.item_id = 6` stores 6), to a literal or a
// placeholder.
func (p *Plugin) rawAssigned(pn *classify.Pinned, col string, t keyType, vars []any) (string, bool) {
	var set *classify.Set
	for i, s := range pn.Sets {
		if p.sameRawColumn(s.Column, col) {
			if set != nil {
				return "", false
			}
			set = &pn.Sets[i]
		}
	}
	if set == nil || !set.Known || set.Value.Array {
		return "", false
	}
	return rawValue(set.Value, t, vars)
}

// rawValue resolves a literal or a placeholder against the arguments, as
// a value of type t (its canonical form). A literal is an integer.
func rawValue(v classify.Value, t keyType, vars []any) (string, bool) {
	if v.Param == 0 {
		if t != keyInt {
			return "", false
		}
		return strconv.FormatInt(v.Int, 10), true
	}
	if v.Param > len(vars) {
		return "", false
	}
	return t.canon(vars[v.Param-1])
}

// placeholderArgs are a statement's arguments as its placeholders number
// them: without a leading pgx.QueryExecMode, which pgx takes as an option
// (and gorm.io/driver/postgres numbers $1 after).
func placeholderArgs(vars []any) []any {
	if len(vars) > 0 {
		if _, ok := vars[0].(pgx.QueryExecMode); ok {
			return vars[1:]
		}
	}
	return vars
}
