package plugin

import (
	"context"
	"database/sql/driver"
	"reflect"
	"strings"
	"sync/atomic"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/freshread/freshread/internal/lib/intkind"
	"github.com/freshread/freshread/lsnstore"
)

// Positions by key (the default; Config.TablePositions turns them off; docs/design/keyed-positions.md): a
// GORM write that proves which rows of its table it touched raises those
// rows' key positions instead of the table's unkeyed position, and a GORM
// read pinned to key values waits only for those keys and the unkeyed
// position. A model's integer primary key, else the catalog's
// (keys_catalog.go); values by their canonical forms (keys_types.go).

// maxKeys caps the keys of one statement: a write touching more raises the
// unkeyed position, a read pinned to more uses the table position.
const maxKeys = 256

// keyedWriteNames returns the names a Create, Update or Delete of table
// raises when it proves which keys it touched, by a process keying table
// by signature sig: the signed keyed table (signedTable), then for
// each key column (the model's integer primary key, then KeyColumns) the
// KeyName of each value it proved or the column's UnkeyedColumnName. ok is
// false when it proves no column (the caller then raises the table, which
// raises its unkeyed position too).
func (p *Plugin) keyedWriteNames(stmt *gorm.Statement, table, sig string) (names []string, ok bool) {
	var kw keyedWrite
	pkCol := ""
	if pk, ok := integerKey(stmt); ok {
		pkCol = pk.DBName
		keys, ok := p.writtenKeys(stmt, table, pk, true)
		kw.add(table, pkCol, keys, ok)
	}
	p.addModelKeyColumns(&kw, stmt, table, pkCol)
	return kw.result(p.signedTable(table, sig))
}

// addModelKeyColumns adds to kw the keys a model's Create, Update or
// Delete proves of table's KeyColumns other than pkCol.
func (p *Plugin) addModelKeyColumns(kw *keyedWrite, stmt *gorm.Statement, table, pkCol string) {
	for _, col := range p.cfg.KeyColumns[table] {
		if strings.EqualFold(col, pkCol) {
			continue
		}
		f := integerField(stmt, col)
		var keys []string
		ok := false
		if f != nil {
			keys, ok = p.writtenKeys(stmt, table, f, false)
		}
		kw.add(table, col, keys, ok)
	}
}

// keyedWrite accumulates the names of a keyed write.
type keyedWrite struct {
	names  []string
	nkeys  int
	proved bool
}

// add records the proven keys (canonical forms) of col (a key's columns
// joined by ","), or its unkeyed position when ok is false.
func (w *keyedWrite) add(table, col string, keys []string, ok bool) {
	if !ok || len(keys) == 0 || w.nkeys+len(keys) > maxKeys {
		w.names = append(w.names, lsnstore.UnkeyedColumnName(table, col))
		return
	}
	for _, k := range keys {
		w.names = append(w.names, lsnstore.KeyNameText(table, col, k))
	}
	w.nkeys += len(keys)
	w.proved = true
}

// result is the write's names, first the keyed table's (signed), or ok
// false when it proved no key.
func (w *keyedWrite) result(signed string) ([]string, bool) {
	if !w.proved {
		return nil, false
	}
	return append([]string{signed}, w.names...), true
}

// writtenKeys returns the values of f's integer column of table in the
// rows a Create, Update or Delete touched, when it proves them. An Update
// that assigns the column moves its rows from the values its WHERE pins
// to the one it assigns: both, when the SQL it ran names that one
// (updateAssigns), else nothing proved.
func (p *Plugin) writtenKeys(stmt *gorm.Statement, table string, f *schema.Field, pk bool) ([]string, bool) {
	switch {
	case hasClause(stmt, "INSERT"):
		if hasClause(stmt, "ON CONFLICT") {
			return nil, false // an upsert may update a row under another key
		}
		return modelKeys(stmt, []*schema.Field{f}, []keyType{keyInt})
	case hasClause(stmt, "UPDATE"):
		old, ok := pinnedKeys(stmt, f.DBName, pk)
		if !ok {
			return nil, false
		}
		v, sets, known := p.updateAssigns(stmt, table, f.DBName)
		switch {
		case !sets:
			return old, true
		case !known:
			return nil, false
		}
		return append(old, v), true // the rows move from old to v
	case hasClause(stmt, "DELETE"):
		return pinnedKeys(stmt, f.DBName, pk)
	}
	return nil, false
}

// keyedReadNames returns the names a read of table pinned to key values
// needs (their key positions, the table's unkeyed position and the
// column's), or ok false: the read needs the table position. A statement
// whose model has no integer primary key is keyed by the key the plugin
// knows for the table (knownKey), from the SQL of its WHERE.
func (p *Plugin) keyedReadNames(stmt *gorm.Statement, table string) (names []string, ok bool) {
	if len(stmt.Joins) > 0 || len(stmt.Preloads) > 0 {
		return nil, false
	}
	tn := p.tableNames(table) // one lookup per read
	pkName := ""
	var pkKey *keyDef
	if pk, ok := integerKey(stmt); ok {
		pkName = pk.DBName
		pkKey = p.modelKey(tn, table, pkName)
		if keys, ok := pinnedKeys(stmt, pkName, true); ok {
			return p.agreedReadNames(stmt.Context, tn, table, pkKey, pkName, keys)
		}
	} else if _, ok := p.knownKey(tn, table); ok {
		// No model names the key (db.Table, a map or a scalar
		// destination): keyed like raw SQL (keys_table.go).
		return p.builtKeyedReadNames(stmt, table)
	}
	for _, col := range p.cfg.KeyColumns[table] {
		if keys, ok := pinnedKeys(stmt, col, false); ok {
			return p.agreedReadNames(stmt.Context, tn, table, pkKey, col, keys)
		}
	}
	return nil, false
}

// agreedReadNames is readNames when this process's key signature of the
// table, which knows pk as its primary key (nil: none), is the one in
// force (keysAgreed).
func (p *Plugin) agreedReadNames(ctx context.Context, tn *tableKeyNames, table string, pk *keyDef, col string, keys []string) ([]string, bool) {
	if len(keys) == 0 || len(keys) > maxKeys || !p.keysAgreed(ctx, tn, table, p.signatureOf(tn, table, pk)) {
		return nil, false
	}
	return tn.readNames(table, col, keys)
}

// readNames are the names a read pinned to keys (canonical forms) of
// table's col (a key's columns joined by ",") needs.
func (tn *tableKeyNames) readNames(table, col string, keys []string) ([]string, bool) {
	if len(keys) == 0 || len(keys) > maxKeys {
		return nil, false
	}
	names := make([]string, 0, len(keys)+2)
	for _, k := range keys {
		names = append(names, lsnstore.KeyNameText(table, col, k))
	}
	return append(names, tn.unkeyed, tn.unkeyedColumn(table, col)), true
}

// tableKeyNames caches a table's unkeyed position names (one allocation
// less per keyed read; tables and key columns are few) and the integer
// primary key the plugin has seen its model use (raw SQL and db.Table
// have no model; they use it, else the catalog's: knownKey).
type tableKeyNames struct {
	unkeyed string
	columns atomic.Pointer[map[string]string] // column -> UnkeyedColumnName
	pk      atomic.Pointer[keyDef]            // one integer column
	claim   atomic.Pointer[signatureClaim]    // the store's answer (keys_signature.go)
	sig     atomic.Pointer[tableSignature]
}

func (p *Plugin) tableNames(table string) *tableKeyNames {
	if v, ok := p.keyNames.Load(table); ok {
		return v.(*tableKeyNames)
	}
	v, _ := p.keyNames.LoadOrStore(table, &tableKeyNames{unkeyed: lsnstore.UnkeyedName(table)})
	return v.(*tableKeyNames)
}

func (tn *tableKeyNames) unkeyedColumn(table, col string) string {
	m := tn.columns.Load()
	if m != nil {
		if n, ok := (*m)[col]; ok {
			return n
		}
	}
	n := lsnstore.UnkeyedColumnName(table, col)
	for {
		next := make(map[string]string, 1)
		if m != nil {
			for k, v := range *m {
				next[k] = v
			}
		}
		next[col] = n
		if tn.columns.CompareAndSwap(m, &next) {
			return n
		}
		m = tn.columns.Load()
	}
}

// learnKey records table's integer primary key column as its models name
// it, for raw SQL and db.Table.
func (p *Plugin) learnKey(table, col string) { p.modelKey(p.tableNames(table), table, col) }

// modelKey records col as the integer primary key of table's model, and
// warns when the catalog names another key (the process keys the table
// by the model's from now on: keys_catalog.go). It returns the key.
func (p *Plugin) modelKey(tn *tableKeyNames, table, col string) *keyDef {
	k, changed := tn.learn(col)
	if !changed {
		return k
	}
	p.keyColumnLearned(table, col)
	if c, ok := p.catalogKey(table); ok && !c.same(k) {
		p.cfg.Logger.Warn("freshread: a model's primary key is not the table's primary key in the catalog; statements without the model key the table by the model's from now on, and processes that have not seen the model by the catalog's (they disagree: one of them reads and writes the table by table position)",
			"table", table, "model", col, "catalog", c.sig)
	}
	return k
}

// learn records the table's integer primary key column and reports
// whether it changed.
func (tn *tableKeyNames) learn(col string) (*keyDef, bool) {
	if k := tn.pk.Load(); k != nil && k.cols[0] == col {
		return k, false
	}
	k := intKey(col) // only a change allocates
	tn.pk.Store(k)
	return k, true
}

// learnModelKey records the integer primary key of a GORM statement's
// table, when it has one.
func (p *Plugin) learnModelKey(stmt *gorm.Statement) {
	if pk, ok := integerKey(stmt); ok {
		if table, ok := statementTable(stmt); ok {
			p.learnKey(table, pk.DBName)
		}
	}
}

// integerField is the model's field for column col when it holds integers.
func integerField(stmt *gorm.Statement, col string) *schema.Field {
	if stmt.Schema == nil {
		return nil
	}
	f := stmt.Schema.LookUpField(col)
	if f == nil || (f.DataType != schema.Int && f.DataType != schema.Uint) {
		return nil
	}
	return f
}

// integerKey is the statement's model's single integer primary key.
func integerKey(stmt *gorm.Statement) (*schema.Field, bool) {
	if stmt.Schema == nil || len(stmt.Schema.PrimaryFields) != 1 {
		return nil, false
	}
	f := stmt.Schema.PrioritizedPrimaryField
	if f == nil || (f.DataType != schema.Int && f.DataType != schema.Uint) {
		return nil, false
	}
	return f, true
}

func hasClause(stmt *gorm.Statement, name string) bool {
	_, ok := stmt.Clauses[name]
	return ok
}

// modelKeys reads the keys of the rows a Create inserted from its model
// (GORM sets keys the database assigned): the canonical forms of fields'
// values, typed types, joined by "," (keyDef). A zero value, or rows that
// are not the model's structs (maps): not known.
func modelKeys(stmt *gorm.Statement, fields []*schema.Field, types []keyType) ([]string, bool) {
	rv := reflect.Indirect(stmt.ReflectValue)
	var keys []string
	add := func(row reflect.Value) bool {
		if row.Kind() != reflect.Struct || stmt.Schema == nil || row.Type() != stmt.Schema.ModelType {
			return false // a map (Model(&T{}).Create(map)) or another type: no field to read
		}
		key := ""
		for i, f := range fields {
			v, zero := f.ValueOf(stmt.Context, row)
			if zero {
				return false
			}
			k, ok := types[i].canon(v)
			if !ok {
				return false
			}
			if i > 0 {
				key += ","
			}
			key += k
		}
		keys = append(keys, key)
		return true
	}
	switch rv.Kind() {
	case reflect.Struct:
		if !add(rv) {
			return nil, false
		}
	case reflect.Slice, reflect.Array:
		if rv.Len() > maxKeys {
			return nil, false
		}
		for i := 0; i < rv.Len(); i++ {
			if !add(reflect.Indirect(rv.Index(i))) {
				return nil, false
			}
		}
	default:
		return nil, false
	}
	return keys, true
}

// pinnedKeys returns the values of col that the statement's WHERE pins at
// top level (an equality or IN ANDed with the rest): every row the
// statement touches has one of them. ok is false when the WHERE pins
// nothing or has a top-level OR.
func pinnedKeys(stmt *gorm.Statement, col string, pk bool) ([]string, bool) {
	c, ok := stmt.Clauses["WHERE"]
	if !ok {
		return nil, false
	}
	where, ok := c.Expression.(clause.Where)
	if !ok {
		return nil, false
	}
	var keys []string
	found := false
	if !walkPins(where.Exprs, col, stmt.Table, pk, &keys, &found) || !found {
		return nil, false
	}
	return keys, true
}

// walkPins looks for the first pinning expression among exprs and the
// conjunctions in them; false on a top-level OR.
func walkPins(exprs []clause.Expression, col, table string, pk bool, keys *[]string, found *bool) bool {
	for _, e := range exprs {
		switch e := e.(type) {
		case clause.OrConditions:
			return false
		case clause.AndConditions:
			if !walkPins(e.Exprs, col, table, pk, keys, found) {
				return false
			}
		default:
			if *found {
				continue // ANDed: a second pin only narrows
			}
			if ks, pins := pinningExpr(e, col, table, pk); pins {
				*keys, *found = ks, true
			}
		}
	}
	return true
}

// pinningExpr reports whether e is `col = v` or `col IN (...)` with integer
// values, and returns their canonical forms.
func pinningExpr(e clause.Expression, col, table string, pk bool) ([]string, bool) {
	switch e := e.(type) {
	case clause.Eq:
		if !namesColumn(e.Column, col, table, pk) {
			return nil, false
		}
		return integerValues([]any{e.Value})
	case clause.IN:
		if !namesColumn(e.Column, col, table, pk) {
			return nil, false
		}
		return integerValues(e.Values)
	case clause.Expr:
		return pinningSQL(e.SQL, e.Vars, col, table)
	}
	return nil, false
}

// pinningSQL reads "<col> = ?", "<col> IN ?" and "<col> IN (?, ...)", with
// the column optionally quoted and qualified by the table.
func pinningSQL(sql string, vars []any, col, table string) ([]string, bool) {
	s := strings.TrimSpace(sql)
	i := strings.IndexAny(s, " =")
	if i <= 0 {
		return nil, false
	}
	if !sameColumn(s[:i], col, table) {
		return nil, false
	}
	rest := strings.TrimSpace(s[i:])
	switch {
	case rest == "= ?" || rest == "=?":
		if len(vars) != 1 {
			return nil, false
		}
		return integerValues(vars)
	case strings.EqualFold(rest, "IN ?") || strings.EqualFold(rest, "IN (?)"):
		if len(vars) != 1 {
			return nil, false
		}
		return integerValues(flatten(vars[0]))
	case len(rest) > 3 && strings.EqualFold(rest[:3], "IN "):
		list := strings.TrimSpace(rest[3:])
		if !strings.HasPrefix(list, "(") || !strings.HasSuffix(list, ")") {
			return nil, false
		}
		for _, p := range strings.Split(list[1:len(list)-1], ",") {
			if strings.TrimSpace(p) != "?" {
				return nil, false
			}
		}
		if strings.Count(list, "?") != len(vars) {
			return nil, false
		}
		return integerValues(vars)
	}
	return nil, false
}

// sameColumn reports whether the SQL identifier s (optionally quoted,
// optionally table-qualified) is col of table. It does not allocate.
func sameColumn(s, col, table string) bool {
	if i := strings.LastIndexByte(s, '.'); i >= 0 {
		if !equalUnquoted(s[:i], table) {
			return false
		}
		s = s[i+1:]
	}
	return equalUnquoted(s, col)
}

// equalUnquoted compares s without its quote characters (` and ") with
// name, ignoring ASCII case.
func equalUnquoted(s, name string) bool {
	j := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '`' || c == '"' {
			continue
		}
		if j >= len(name) || lower(c) != lower(name[j]) {
			return false
		}
		j++
	}
	return j == len(name)
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// namesColumn reports whether a clause column (a clause.Column or a
// string) is col of table, or with pk GORM's name for the primary key.
func namesColumn(c any, col, table string, pk bool) bool {
	switch c := c.(type) {
	case string:
		return sameColumn(c, col, table)
	case clause.Column:
		if c.Raw || c.Alias != "" {
			return false
		}
		if c.Table != "" && c.Table != clause.CurrentTable && !strings.EqualFold(c.Table, table) {
			return false
		}
		return pk && c.Name == clause.PrimaryKey || strings.EqualFold(c.Name, col)
	}
	return false
}

// flatten turns a slice argument (id IN ?) into its elements.
func flatten(v any) []any {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return []any{v}
	}
	if rv.Type().Elem().Kind() == reflect.Uint8 {
		return []any{v} // []byte, [16]byte: one value, as GORM binds it
	}
	out := make([]any, rv.Len())
	for i := range out {
		out[i] = rv.Index(i).Interface()
	}
	return out
}

// integerValues are the canonical forms of integers vs.
func integerValues(vs []any) ([]string, bool) { return keyValues(keyInt, vs) }

// keyValues are the canonical forms of vs as values of a column of type
// t, or ok false when one is not certain.
func keyValues(t keyType, vs []any) ([]string, bool) {
	if len(vs) == 0 || len(vs) > maxKeys {
		return nil, false
	}
	out := make([]string, len(vs))
	for i, v := range vs {
		k, ok := t.canon(v)
		if !ok {
			return nil, false
		}
		out[i] = k
	}
	return out, true
}

// integerValue is v as an int64 when v is a Go integer (of any integer
// kind, named or not): not a string, a float or a driver.Valuer, which
// could name the row another way.
func integerValue(v any) (int64, bool) {
	if _, ok := v.(driver.Valuer); ok {
		return 0, false
	}
	return intkind.Of(v)
}

// mapRows reports whether a statement's rows are maps (Create or Updates
// from a map or a slice of maps), whatever its model: no field of the
// model can be read from them.
func mapRows(stmt *gorm.Statement) bool {
	if !stmt.ReflectValue.IsValid() {
		return false
	}
	t := reflect.Indirect(stmt.ReflectValue).Type()
	if k := t.Kind(); k == reflect.Slice || k == reflect.Array {
		t = t.Elem()
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
	}
	return t.Kind() == reflect.Map
}
