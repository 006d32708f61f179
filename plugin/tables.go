package plugin

import (
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/lsnstore"
)

// statementTables returns the tables a GORM-built statement touches: its
// table, its joins (Joins and clause.From), the tables of subqueries in its
// clauses, and those of subqueries written as text in its conditions,
// selected columns and orderings (classified by cls; nil: such a
// statement is unknown). It returns ok=false when any part is unknown: then
// the database-wide position applies.
func statementTables(stmt *gorm.Statement, cls *classify.Classifier) (tables []string, ok bool) {
	return tableWalker{cls: cls}.statement(nil, stmt, 0)
}

// tableWalker walks a statement's clauses for statementTables.
type tableWalker struct{ cls *classify.Classifier }

const maxSubqueryDepth = 8

func (w tableWalker) statement(tables []string, stmt *gorm.Statement, depth int) ([]string, bool) {
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
		if j.Expression != nil {
			return nil, false
		}
		tables = append(tables, t)
		for _, c := range j.Conds {
			if sub, isDB := c.(*gorm.DB); isDB && sub != nil && sub.Statement != nil && sub.Statement.SQL.Len() == 0 {
				// Joins("Rel", db.Where(...)): conditions on the joined
				// table, a statement without a table of its own.
				tables, ok = w.clauses(tables, sub.Statement, depth+1)
			} else {
				tables, ok = w.value(tables, c, depth)
			}
			if !ok {
				return nil, false
			}
		}
		if j.On != nil {
			if tables, ok = w.expr(tables, *j.On, depth); !ok {
				return nil, false
			}
		}
	}
	return w.clauses(tables, stmt, depth)
}

// clauses adds the tables of a statement's selected columns and clauses.
func (w tableWalker) clauses(tables []string, stmt *gorm.Statement, depth int) ([]string, bool) {
	if depth > maxSubqueryDepth {
		return nil, false
	}
	var ok bool
	for _, sel := range stmt.Selects {
		if tables, ok = w.fragment(tables, sel); !ok {
			return nil, false
		}
	}
	for name, c := range stmt.Clauses {
		if strings.HasPrefix(name, "gorm:db_resolver") {
			continue // dbresolver.Use: a hint, not SQL
		}
		if tables, ok = w.expr(tables, c.Expression, depth); !ok {
			return nil, false
		}
	}
	return tables, true
}

// fragment adds the tables of SQL text written by hand. Text that cannot
// hold a subquery (no SELECT or TABLE keyword) reads nothing but the
// statement's tables; other text is classified as the condition of a
// SELECT, and is unknown unless that is a plain read whose tables are all
// named.
func (w tableWalker) fragment(tables []string, sql string) ([]string, bool) {
	if !mayReadTables(sql) {
		return tables, true
	}
	if w.cls == nil {
		return nil, false
	}
	r := w.cls.Classify("SELECT 1 WHERE (" + placeholdersToNull(sql) + ")")
	if r.Kind != classify.Read || r.UnknownTables {
		return nil, false
	}
	tables = append(tables, normalizeTables(r.Reads)...)
	if r.Catalog {
		tables = append(tables, lsnstore.Schema)
	}
	return tables, true
}

// placeholdersToNull replaces GORM's placeholders (? and @name) with NULL,
// so that the classifier parses a fragment as it will be sent.
func placeholdersToNull(sql string) string {
	if !strings.ContainsAny(sql, "?@") {
		return sql
	}
	var b strings.Builder
	b.Grow(len(sql) + 16)
	for i := 0; i < len(sql); i++ {
		switch c := sql[i]; {
		case c == '?':
			b.WriteString("NULL")
		case c == '@' && i+1 < len(sql) && identByte(sql[i+1]):
			b.WriteString("NULL")
			for i+1 < len(sql) && identByte(sql[i+1]) {
				i++
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// mayReadTables reports whether SQL text has the word SELECT or TABLE
// (any case): a subquery, or PostgreSQL's TABLE t.
func mayReadTables(sql string) bool {
	for i := 0; i+5 <= len(sql); i++ {
		c := sql[i] | 0x20
		if c != 's' && c != 't' {
			continue
		}
		var word string
		switch {
		case i+6 <= len(sql) && strings.EqualFold(sql[i:i+6], "select"):
			word = "select"
		case strings.EqualFold(sql[i:i+5], "table"):
			word = "table"
		default:
			continue
		}
		end := i + len(word)
		if (i == 0 || !identByte(sql[i-1])) && (end == len(sql) || !identByte(sql[end])) {
			return true
		}
	}
	return false
}

func identByte(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c|0x20 >= 'a' && c|0x20 <= 'z' || c >= 0x80
}

// from adds the tables of a clause.From (GORM builds joins of many2many
// associations and Joins into one): its tables, each join's table and
// conditions; a join written as an expression is unknown.
func (w tableWalker) from(tables []string, f clause.From, depth int) ([]string, bool) {
	var ok bool
	for _, t := range f.Tables {
		if tables, ok = appendClauseTable(tables, t); !ok {
			return nil, false
		}
	}
	for _, j := range f.Joins {
		if j.Expression != nil {
			return nil, false // a join written as SQL
		}
		if tables, ok = appendClauseTable(tables, j.Table); !ok {
			return nil, false
		}
		if tables, ok = w.exprs(tables, j.ON.Exprs, depth); !ok {
			return nil, false
		}
	}
	return tables, true
}

// appendClauseTable adds a clause.Table: the statement's own table
// (clause.CurrentTable, already added) adds nothing; a raw name must be a
// plain table name.
func appendClauseTable(tables []string, t clause.Table) ([]string, bool) {
	switch {
	case t.Name == clause.CurrentTable:
		return tables, true
	case t.Raw:
		name, ok := tableFromExpr(t.Name)
		if !ok {
			return nil, false
		}
		return append(tables, name), true
	case t.Name == "":
		return nil, false
	}
	return append(tables, lsnstore.TableKey(t.Name)), true
}

// columns adds the tables of raw column text (Select, Order and Group
// columns written by hand).
func (w tableWalker) columns(tables []string, cols []clause.Column) ([]string, bool) {
	var ok bool
	for _, c := range cols {
		if tables, ok = w.column(tables, c); !ok {
			return nil, false
		}
	}
	return tables, true
}

// column adds the tables of one column: text when written by hand (Raw).
func (w tableWalker) column(tables []string, c clause.Column) ([]string, bool) {
	if !c.Raw {
		return tables, true
	}
	return w.fragment(tables, c.Name)
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

// expr walks the clause expressions GORM builds; an expression type it
// does not know makes the tables unknown.
func (w tableWalker) expr(tables []string, e clause.Expression, depth int) ([]string, bool) {
	var ok bool
	switch x := e.(type) {
	case nil:
	case clause.Where:
		return w.exprs(tables, x.Exprs, depth)
	case clause.AndConditions:
		return w.exprs(tables, x.Exprs, depth)
	case clause.OrConditions:
		return w.exprs(tables, x.Exprs, depth)
	case clause.NotConditions:
		return w.exprs(tables, x.Exprs, depth)
	case clause.Expr:
		if tables, ok = w.fragment(tables, x.SQL); !ok {
			return nil, false
		}
		return w.vars(tables, x.Vars, depth)
	case *clause.Expr:
		if x == nil {
			return tables, true
		}
		if tables, ok = w.fragment(tables, x.SQL); !ok {
			return nil, false
		}
		return w.vars(tables, x.Vars, depth)
	case clause.NamedExpr:
		if tables, ok = w.fragment(tables, x.SQL); !ok {
			return nil, false
		}
		return w.vars(tables, x.Vars, depth)
	case clause.Eq:
		return w.value(tables, x.Value, depth)
	case clause.Neq:
		return w.value(tables, x.Value, depth)
	case clause.Gt:
		return w.value(tables, x.Value, depth)
	case clause.Gte:
		return w.value(tables, x.Value, depth)
	case clause.Lt:
		return w.value(tables, x.Value, depth)
	case clause.Lte:
		return w.value(tables, x.Value, depth)
	case clause.Like:
		return w.value(tables, x.Value, depth)
	case clause.IN:
		return w.vars(tables, x.Values, depth)
	case clause.Select:
		if tables, ok = w.columns(tables, x.Columns); !ok {
			return nil, false
		}
		return w.expr(tables, x.Expression, depth)
	case clause.OrderBy:
		for _, c := range x.Columns {
			if tables, ok = w.column(tables, c.Column); !ok {
				return nil, false
			}
		}
		return w.expr(tables, x.Expression, depth)
	case clause.GroupBy:
		if tables, ok = w.columns(tables, x.Columns); !ok {
			return nil, false
		}
		return w.exprs(tables, x.Having, depth)
	case clause.From:
		return w.from(tables, x, depth)
	case clause.Limit, clause.Locking:
	default:
		return nil, false
	}
	return tables, true
}

func (w tableWalker) exprs(tables []string, es []clause.Expression, depth int) ([]string, bool) {
	var ok bool
	for _, e := range es {
		if tables, ok = w.expr(tables, e, depth); !ok {
			return nil, false
		}
	}
	return tables, true
}

func (w tableWalker) vars(tables []string, vars []any, depth int) ([]string, bool) {
	var ok bool
	for _, v := range vars {
		if tables, ok = w.value(tables, v, depth); !ok {
			return nil, false
		}
	}
	return tables, true
}

// value adds the tables of a subquery (*gorm.DB) or nested expression used
// as a value; plain values add nothing.
func (w tableWalker) value(tables []string, v any, depth int) ([]string, bool) {
	switch x := v.(type) {
	case *gorm.DB:
		if x == nil || x.Statement == nil {
			return tables, true
		}
		if x.Statement.SQL.Len() > 0 {
			return nil, false // raw subquery text
		}
		return w.statement(tables, x.Statement, depth+1)
	case clause.Expression:
		return w.expr(tables, x, depth+1)
	case []any:
		return w.vars(tables, x, depth+1)
	}
	return tables, true
}
