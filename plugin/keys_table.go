package plugin

import (
	"database/sql"
	"database/sql/driver"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/freshread/freshread/lsnstore"
)

// Keyed positions for GORM statements whose model does not name the
// table's integer primary key: db.Table("items") with a map, a scalar or
// no destination, db.Table(...).Update, a model without an integer key.
// They are keyed like raw SQL (keys_raw.go), by the key the plugin knows
// for the table (knownKey: a model's, else the catalog's), from the SQL
// GORM builds: a write's once it has run, a read's WHERE built here before
// the statement runs (routing comes first). Any doubt (an OR, a NOT, a
// subquery, a join, a condition this file does not know) is the table
// position.

// builtKeyedReadNames returns the names a read of table by a statement
// without a model key needs, from its WHERE, or ok false (the table
// position).
func (p *Plugin) builtKeyedReadNames(stmt *gorm.Statement, table string) ([]string, bool) {
	sql, vars, ok := whereSQL(stmt)
	if !ok {
		return nil, false
	}
	c := p.classify(sql)
	if c.kind != kindRead || c.locks || c.pinned == nil || lsnstore.TableKey(c.pinned.Table) != table {
		return nil, false
	}
	return p.rawKeyedReadNames(stmt.Context, c.pinned, table, vars)
}

// builtWriteNames returns the names a write keyed fromSQL raises, from the
// SQL GORM built and ran (an UPDATE or DELETE of kw.table pinning a key
// column, an INSERT of a map listing the key's values), or ok false when
// it proves no key (the caller raises the table).
func (p *Plugin) builtWriteNames(stmt *gorm.Statement, kw keyedWriteOf) ([]string, bool) {
	if hasClause(stmt, "INSERT") && stmt.Schema != nil && !mapRows(stmt) {
		return p.createdWriteNames(stmt, kw)
	}
	// An UPDATE or DELETE, or a Create from a map (with or without a
	// model): the SQL GORM built, read as raw SQL (an INSERT: its VALUES).
	c := p.classify(stmt.SQL.String())
	if c.kind != kindWrite || c.pinned == nil || len(c.writes) != 1 || c.writes[0] != kw.table {
		return nil, false
	}
	return p.pinnedWriteNames(c.pinned, kw.table, kw.pk, kw.sig, stmt.Vars)
}

// createdWriteNames returns the names a Create of a model whose table's
// key the plugin knows (a uuid or composite primary key) raises: the keys
// of the rows it inserted, read from the model after the insert (modelKeys:
// what GORM sent, or what the database returned), or ok false. Every key
// column must be a field GORM writes (one it may not write, or that
// Select or Omit leaves out, holds the caller's value, not the row's).
// KeyColumns as a model's Create.
func (p *Plugin) createdWriteNames(stmt *gorm.Statement, kw keyedWriteOf) ([]string, bool) {
	if stmt.Schema == nil || hasClause(stmt, "ON CONFLICT") {
		return nil, false // an upsert may update a row under another key
	}
	var w keyedWrite
	fields := make([]*schema.Field, len(kw.pk.cols))
	selected, restricted := stmt.SelectAndOmitColumns(true, false)
	ok := true
	for i, col := range kw.pk.cols {
		f := stmt.Schema.LookUpField(col)
		if f == nil || !f.Creatable {
			ok = false
			break
		}
		if sel, named := selected[f.DBName]; named && !sel || !named && restricted {
			ok = false // not inserted: the database chose the value
			break
		}
		fields[i] = f
	}
	var keys []string
	if ok {
		keys, ok = modelKeys(stmt, fields, kw.pk.types)
	}
	w.add(kw.table, kw.pk.name, keys, ok)
	pkCol, _ := kw.pk.single()
	p.addModelKeyColumns(&w, stmt, kw.table, pkCol)
	return w.result(p.signedTable(kw.table, kw.sig))
}

// whereSQL builds `SELECT * FROM <table> WHERE <the statement's WHERE>`
// with the statement's dialect and returns it with its arguments. It
// builds on a statement of its own, so that nothing reaches the caller's
// (an error, a variable); ok is false when the WHERE holds anything but
// conditions of plain values (whereBuildable) or building fails.
func whereSQL(stmt *gorm.Statement) (string, []any, bool) {
	c, ok := stmt.Clauses["WHERE"]
	if !ok || stmt.DB == nil || stmt.DB.Config == nil || stmt.DB.Dialector == nil {
		return "", nil, false
	}
	where, ok := c.Expression.(clause.Where)
	if !ok || len(where.Exprs) == 0 || !whereBuildable(where.Exprs) {
		return "", nil, false
	}
	db := &gorm.DB{Config: stmt.DB.Config}
	s := &gorm.Statement{DB: db, Table: stmt.Table, Context: stmt.Context, Clauses: map[string]clause.Clause{}}
	db.Statement = s
	s.SQL.Grow(64)
	s.SQL.WriteString("SELECT * FROM ")
	if stmt.TableExpr != nil {
		if len(stmt.TableExpr.Vars) > 0 {
			return "", nil, false
		}
		s.SQL.WriteString(stmt.TableExpr.SQL)
	} else {
		s.WriteQuoted(stmt.Table)
	}
	s.SQL.WriteString(" WHERE ")
	where.Build(s)
	if db.Error != nil {
		return "", nil, false
	}
	return s.SQL.String(), s.Vars, true
}

// whereBuildable reports whether conditions are ANDed SQL text, equalities
// and IN lists of plain values: what building cannot turn into a query of
// its own (a subquery runs GORM's query callbacks) or an error on the
// statement. Anything else (an OR or a NOT, which pin nothing, the other
// comparisons of clause) reads by table.
func whereBuildable(exprs []clause.Expression) bool {
	for _, e := range exprs {
		ok := false
		switch e := e.(type) {
		case clause.AndConditions:
			ok = whereBuildable(e.Exprs)
		case clause.Expr:
			ok = plainValues(e.Vars)
		case clause.Eq:
			ok = plainColumn(e.Column) && plainValue(e.Value)
		case clause.IN:
			ok = plainColumn(e.Column) && plainValues(e.Values)
		}
		if !ok {
			return false
		}
	}
	return true
}

// plainColumn: a column name, not GORM's name for the model's primary
// key (an error without a model).
func plainColumn(c any) bool {
	switch c := c.(type) {
	case string:
		return true
	case clause.Column:
		return c.Name != clause.PrimaryKey
	}
	return false
}

func plainValues(vs []any) bool {
	if len(vs) > maxKeys {
		return false
	}
	for _, v := range vs {
		if !plainValue(v) {
			return false
		}
	}
	return true
}

// plainValue: a value GORM binds as a parameter (or a list of them), not
// one it builds SQL from.
func plainValue(v any) bool {
	switch v.(type) {
	case nil, []byte:
		return true
	case *gorm.DB, gorm.Valuer, clause.Expression, clause.Interface, clause.Column, clause.Table, sql.NamedArg:
		return false
	case driver.Valuer:
		return true
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return true
	}
	if rv.Len() > maxKeys {
		return false
	}
	for i := 0; i < rv.Len(); i++ {
		if !plainValue(rv.Index(i).Interface()) {
			return false
		}
	}
	return true
}
