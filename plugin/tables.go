package plugin

import (
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/lsnstore"
)

// statementTables returns the tables a GORM-built statement touches: its
// table, its joins, and the tables of subqueries in its clauses. It returns
// ok=false when any part is unknown: then the database-wide position
// applies.
func statementTables(stmt *gorm.Statement) (tables []string, ok bool) {
	return appendStatementTables(nil, stmt, 0)
}

const maxSubqueryDepth = 8

func appendStatementTables(tables []string, stmt *gorm.Statement, depth int) ([]string, bool) {
	if depth > maxSubqueryDepth {
		return nil, false
	}
	if stmt.Table == "" && stmt.Model != nil && stmt.TableExpr == nil {
		if err := stmt.Parse(stmt.Model); err != nil {
			return nil, false
		}
	}
	name, ok := statementTable(stmt)
	if !ok {
		return nil, false
	}
	tables = append(tables, name)
	if catalogStatement(stmt) {
		// db.Table("information_schema.tables"): the catalog.
		tables = append(tables, lsnstore.Schema)
	}
	for _, j := range stmt.Joins {
		t, ok := joinTable(stmt, j.Name)
		if !ok {
			return nil, false
		}
		tables = append(tables, t)
	}
	for name, c := range stmt.Clauses {
		if strings.HasPrefix(name, "gorm:db_resolver") {
			continue // dbresolver.Use: a hint, not SQL
		}
		var ok bool
		if tables, ok = appendExprTables(tables, c.Expression, depth); !ok {
			return nil, false
		}
	}
	return tables, true
}

// statementTable is the normalized name of the one table a statement
// names. With a table expression (db.Table(...)) the name comes from the
// expression, not from Statement.Table, which GORM sets to the alias for
// `orders o`. ok is false when there is no single plain table.
func statementTable(stmt *gorm.Statement) (string, bool) {
	if stmt.TableExpr == nil {
		if stmt.Table == "" {
			return "", false
		}
		return lsnstore.TableKey(stmt.Table), true
	}
	if len(stmt.TableExpr.Vars) > 0 {
		return "", false // a subquery or a parameter
	}
	return tableFromExpr(stmt.TableExpr.SQL)
}

// catalogStatement reports whether the statement's table is a catalog
// relation (information_schema.tables, pg_class): it depends on the
// schema position too.
func catalogStatement(stmt *gorm.Statement) bool {
	if stmt.TableExpr == nil {
		return classify.IsCatalogTable(stmt.Table)
	}
	fields := strings.Fields(stmt.TableExpr.SQL)
	return len(fields) > 0 && classify.IsCatalogTable(fields[0])
}

// tableFromExpr accepts `"orders"`, `orders o`, `orders AS o` and
// `"public"."orders"`; anything else (joins or subqueries written by hand)
// is unknown.
func tableFromExpr(sql string) (string, bool) {
	if strings.ContainsAny(sql, "(),;") {
		return "", false
	}
	fields := strings.Fields(sql)
	switch len(fields) {
	case 1, 2:
	case 3:
		if !strings.EqualFold(fields[1], "as") {
			return "", false
		}
	default:
		return "", false
	}
	return lsnstore.TableKey(fields[0]), true
}

// joinTable resolves a Joins("Rel") name through the schema's
// relationships, also nested ("Rel.Sub"); a raw join string is unknown.
func joinTable(stmt *gorm.Statement, name string) (string, bool) {
	if stmt.Schema == nil || strings.ContainsAny(name, " ()") {
		return "", false
	}
	s := stmt.Schema
	for _, part := range strings.Split(name, ".") {
		rel, ok := s.Relationships.Relations[part]
		if !ok || rel.FieldSchema == nil {
			return "", false
		}
		if rel.JoinTable != nil {
			return "", false // many2many joins also read the join table; keep it simple
		}
		s = rel.FieldSchema
	}
	return lsnstore.TableKey(s.Table), true
}

// appendExprTables walks the clause expressions GORM builds; an expression
// type it does not know makes the tables unknown.
func appendExprTables(tables []string, e clause.Expression, depth int) ([]string, bool) {
	ok := true
	switch x := e.(type) {
	case nil:
	case clause.Where:
		for _, ex := range x.Exprs {
			if tables, ok = appendExprTables(tables, ex, depth); !ok {
				return nil, false
			}
		}
	case clause.AndConditions:
		return appendExprsTables(tables, x.Exprs, depth)
	case clause.OrConditions:
		return appendExprsTables(tables, x.Exprs, depth)
	case clause.NotConditions:
		return appendExprsTables(tables, x.Exprs, depth)
	case clause.Expr:
		return appendVarsTables(tables, x.Vars, depth)
	case *clause.Expr:
		return appendVarsTables(tables, x.Vars, depth)
	case clause.NamedExpr:
		return appendVarsTables(tables, x.Vars, depth)
	case clause.Eq:
		return appendVarTables(tables, x.Value, depth)
	case clause.Neq:
		return appendVarTables(tables, x.Value, depth)
	case clause.Gt:
		return appendVarTables(tables, x.Value, depth)
	case clause.Gte:
		return appendVarTables(tables, x.Value, depth)
	case clause.Lt:
		return appendVarTables(tables, x.Value, depth)
	case clause.Lte:
		return appendVarTables(tables, x.Value, depth)
	case clause.Like:
		return appendVarTables(tables, x.Value, depth)
	case clause.IN:
		return appendVarsTables(tables, x.Values, depth)
	case clause.Select:
		return appendExprTables(tables, x.Expression, depth)
	case clause.OrderBy:
		return appendExprTables(tables, x.Expression, depth)
	case clause.GroupBy:
		return appendExprsTables(tables, x.Having, depth)
	case clause.Limit, clause.Locking:
	default:
		return nil, false
	}
	return tables, ok
}

func appendExprsTables(tables []string, es []clause.Expression, depth int) ([]string, bool) {
	var ok bool
	for _, e := range es {
		if tables, ok = appendExprTables(tables, e, depth); !ok {
			return nil, false
		}
	}
	return tables, true
}

func appendVarsTables(tables []string, vars []any, depth int) ([]string, bool) {
	var ok bool
	for _, v := range vars {
		if tables, ok = appendVarTables(tables, v, depth); !ok {
			return nil, false
		}
	}
	return tables, true
}

// appendVarTables adds the tables of a subquery (*gorm.DB) or nested
// expression used as a value; plain values add nothing.
func appendVarTables(tables []string, v any, depth int) ([]string, bool) {
	switch x := v.(type) {
	case *gorm.DB:
		if x == nil || x.Statement == nil {
			return tables, true
		}
		if x.Statement.SQL.Len() > 0 {
			return nil, false // raw subquery text
		}
		return appendStatementTables(tables, x.Statement, depth+1)
	case clause.Expression:
		return appendExprTables(tables, x, depth+1)
	case []any:
		return appendVarsTables(tables, x, depth+1)
	}
	return tables, true
}
