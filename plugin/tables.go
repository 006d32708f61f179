package plugin

import (
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/lsnstore"
)

// statementWalk is what routing learns of a GORM-built statement from its
// clauses and the SQL text written by hand in them.
type statementWalk struct {
	// tables are the tables the statement reads: its table, its joins
	// (Joins and clause.From), the tables of subqueries in its clauses
	// and of those written as text. Valid when known.
	tables []string
	// known: every table is named. Otherwise the database-wide position
	// applies (a part is unknown, or the statement calls a user function
	// declared read-only, whose body may read any table).
	known bool
	// opaque: the statement may read rows other than those its
	// conditions pin (a subquery, a join, a call of a function other than
	// the immutable built-ins): a read pinned by key waits for its
	// tables, not for its keys' positions.
	opaque bool
	// write: text written by hand calls a function that writes, or one
	// that is not an immutable built-in in text the classifier cannot
	// parse: the statement goes to the primary and is published as a
	// write of unknown tables.
	write bool
	// locks: text written by hand holds a locking subquery (the primary).
	locks bool
	// session: text written by hand changes session state (set_config):
	// the primary.
	session bool
}

// walkStatement walks a GORM-built statement's clauses, classifying the
// text written by hand in them with cls (nil: such text is unknown, and a
// write when it calls a function).
func walkStatement(stmt *gorm.Statement, cls *classify.Classifier) statementWalk {
	w := tableWalker{cls: cls}
	w.statement(stmt, 0)
	return statementWalk{tables: w.tables, known: !w.unknown, opaque: w.opaque, write: w.write, locks: w.locks, session: w.session}
}

// statementTables is walkStatement's tables, ok=false when any part is
// unknown: then the database-wide position applies.
func statementTables(stmt *gorm.Statement, cls *classify.Classifier) (tables []string, ok bool) {
	wk := walkStatement(stmt, cls)
	if !wk.known {
		return nil, false
	}
	return wk.tables, true
}

// tableWalker walks a statement's clauses for walkStatement. A part whose
// tables are unknown does not end the walk: a later part may still write.
type tableWalker struct {
	cls                                    *classify.Classifier
	tables                                 []string
	unknown, opaque, write, locks, session bool
}

const maxSubqueryDepth = 8

func (w *tableWalker) statement(stmt *gorm.Statement, depth int) {
	if depth > maxSubqueryDepth {
		w.unknown, w.opaque = true, true
		return
	}
	if stmt.Table == "" && stmt.Model != nil && stmt.TableExpr == nil {
		if err := stmt.Parse(stmt.Model); err != nil {
			w.unknown, w.opaque = true, true
			return
		}
	}
	if name, ok := statementTable(stmt); ok {
		w.tables = append(w.tables, name)
	} else {
		w.unknown = true
		if te := stmt.TableExpr; te != nil {
			// db.Table("(?) AS x", sub), or a FROM written by hand.
			w.opaque = true
			w.fragment(te.SQL, atFrom)
			w.vars(te.Vars, depth)
		}
	}
	if catalogStatement(stmt) {
		// db.Table("information_schema.tables"): the catalog.
		w.tables = append(w.tables, lsnstore.Schema)
	}
	for _, j := range stmt.Joins {
		w.opaque = true
		switch t, ok := joinTable(stmt, j.Name); {
		case j.Expression != nil:
			w.unknown = true
			w.exprAt(j.Expression, depth, atJoin)
		case ok:
			w.tables = append(w.tables, t)
		default:
			w.unknown = true
			w.fragment(j.Name, atJoin) // a join written by hand
		}
		for _, c := range j.Conds {
			if sub, isDB := c.(*gorm.DB); isDB && sub != nil && sub.Statement != nil && sub.Statement.SQL.Len() == 0 {
				// Joins("Rel", db.Where(...)): conditions on the joined
				// table, a statement without a table of its own.
				w.clauses(sub.Statement, depth+1)
			} else {
				w.value(c, depth)
			}
		}
		if j.On != nil {
			w.expr(*j.On, depth)
		}
	}
	w.clauses(stmt, depth)
}

// clauses adds the tables of a statement's selected columns and clauses.
func (w *tableWalker) clauses(stmt *gorm.Statement, depth int) {
	if depth > maxSubqueryDepth {
		w.unknown, w.opaque = true, true
		return
	}
	for _, sel := range stmt.Selects {
		w.fragment(sel, atSelect)
	}
	for name, c := range stmt.Clauses {
		if strings.HasPrefix(name, "gorm:db_resolver") {
			continue // dbresolver.Use: a hint, not SQL
		}
		w.expr(c.Expression, depth)
	}
}

// fragment adds what SQL text written by hand, in its place at of a
// statement, reads. Text that neither calls a function other than the
// immutable built-ins nor can hold a subquery (scanFragment) reads only
// the statement's rows and costs only the scan. Other text may read other
// rows (opaque), and is classified in a statement that parses for its
// place: a write makes the statement one; a read adds its tables, unknown
// when it calls a user function declared read-only or does not name them
// all.
func (w *tableWalker) fragment(sql string, at fragmentPlace) {
	f := scanFragment(sql, w.dialect())
	if f == 0 {
		return
	}
	w.opaque = true
	if w.cls == nil {
		w.unknown = true
		w.write = w.write || f&scanCall != 0
		return
	}
	r := w.cls.Classify(at.wrap(w.cls.Dialect(), placeholdersToNull(sql)))
	switch {
	case r.Kind == classify.Read:
		if r.UnknownTables || r.CallsUserFunctions || at == atJoin || at == atFrom {
			w.unknown = true // (a join or FROM written by hand: its tables at best)
		}
		w.tables = append(w.tables, normalizeTables(r.Reads)...)
		if r.Catalog {
			w.tables = append(w.tables, lsnstore.Schema)
		}
	case r.Kind == classify.Buffer:
		w.unknown, w.session = true, true
	case r.Reason == classify.ReasonUnparseable:
		// Text the classifier cannot parse: a write when it calls a
		// function that is not an immutable built-in.
		w.unknown = true
		w.write = w.write || f&scanCall != 0
	case r.Locks && !r.UnknownTables && len(r.Writes) == 0:
		w.unknown, w.locks = true, true // a locking subquery
	default:
		w.unknown, w.write = true, true
	}
}

// dialect is the classifier's dialect (PostgreSQL without one).
func (w *tableWalker) dialect() classify.Dialect {
	if w.cls == nil {
		return classify.Postgres
	}
	return w.cls.Dialect()
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

func identByte(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c|0x20 >= 'a' && c|0x20 <= 'z' || c >= 0x80
}

// from adds the tables of a clause.From (GORM builds joins of many2many
// associations and Joins into one): its tables, each join's table and
// conditions; a join written as an expression is unknown.
func (w *tableWalker) from(f clause.From, depth int) {
	for _, t := range f.Tables {
		w.clauseTable(t)
	}
	for _, j := range f.Joins {
		w.opaque = true
		if j.Expression != nil {
			w.unknown = true // a join written as SQL
			w.exprAt(j.Expression, depth, atJoin)
			continue
		}
		w.clauseTable(j.Table)
		w.exprs(j.ON.Exprs, depth)
	}
}

// clauseTable adds a clause.Table: the statement's own table
// (clause.CurrentTable, already added) adds nothing; a raw name must be a
// plain table name.
func (w *tableWalker) clauseTable(t clause.Table) {
	switch {
	case t.Name == clause.CurrentTable:
		return
	case t.Raw:
		w.opaque = true
		if name, ok := tableFromExpr(t.Name); ok {
			w.tables = append(w.tables, name)
			return
		}
		w.unknown = true
		w.fragment(t.Name, atFrom)
		return
	case t.Name == "":
		w.unknown = true
		return
	}
	w.opaque = true
	w.tables = append(w.tables, lsnstore.TableKey(t.Name))
}

// columns adds the tables of raw column text (Select and Group columns
// written by hand), in its place at.
func (w *tableWalker) columns(cols []clause.Column, at fragmentPlace) {
	for _, c := range cols {
		w.column(c, at)
	}
}

// column adds the tables of one column: text when written by hand (Raw).
func (w *tableWalker) column(c clause.Column, at fragmentPlace) {
	if c.Raw {
		w.fragment(c.Name, at)
	}
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

// tableFromExpr is the normalized table a db.Table expression names
// (classify.TableExprName); anything else (joins or subqueries written by
// hand) is unknown.
func tableFromExpr(sql string) (string, bool) {
	name, ok := classify.TableExprName(sql)
	if !ok {
		return "", false
	}
	return lsnstore.TableKey(name), true
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
// does not know makes the tables unknown (and the rows: opaque). Text in
// it is a condition.
func (w *tableWalker) expr(e clause.Expression, depth int) {
	w.exprAt(e, depth, atCondition)
}

// exprAt is expr for an expression in place at (text written by hand in it
// is classified there).
func (w *tableWalker) exprAt(e clause.Expression, depth int, at fragmentPlace) {
	switch x := e.(type) {
	case nil:
	case clause.Where:
		w.exprs(x.Exprs, depth)
	case clause.AndConditions:
		w.exprs(x.Exprs, depth)
	case clause.OrConditions:
		w.exprs(x.Exprs, depth)
	case clause.NotConditions:
		w.exprs(x.Exprs, depth)
	case clause.Expr:
		w.fragment(x.SQL, at)
		w.vars(x.Vars, depth)
	case *clause.Expr:
		if x != nil {
			w.fragment(x.SQL, at)
			w.vars(x.Vars, depth)
		}
	case clause.NamedExpr:
		w.fragment(x.SQL, at)
		w.vars(x.Vars, depth)
	case clause.Eq:
		w.value(x.Value, depth)
	case clause.Neq:
		w.value(x.Value, depth)
	case clause.Gt:
		w.value(x.Value, depth)
	case clause.Gte:
		w.value(x.Value, depth)
	case clause.Lt:
		w.value(x.Value, depth)
	case clause.Lte:
		w.value(x.Value, depth)
	case clause.Like:
		w.value(x.Value, depth)
	case clause.IN:
		w.vars(x.Values, depth)
	case clause.Select:
		w.columns(x.Columns, atSelect)
		w.exprAt(x.Expression, depth, atSelect)
	case clause.OrderBy:
		for _, c := range x.Columns {
			w.column(c.Column, atOrder)
		}
		w.exprAt(x.Expression, depth, atOrder)
	case clause.GroupBy:
		w.columns(x.Columns, atGroup)
		w.exprs(x.Having, depth)
	case clause.From:
		w.from(x, depth)
	case clause.Limit, clause.Locking:
	default:
		w.unknown, w.opaque = true, true
	}
}

func (w *tableWalker) exprs(es []clause.Expression, depth int) {
	for _, e := range es {
		w.expr(e, depth)
	}
}

func (w *tableWalker) vars(vars []any, depth int) {
	for _, v := range vars {
		w.value(v, depth)
	}
}

// value adds the tables of a subquery (*gorm.DB) or nested expression used
// as a value; plain values add nothing.
func (w *tableWalker) value(v any, depth int) {
	switch x := v.(type) {
	case *gorm.DB:
		if x == nil || x.Statement == nil {
			return
		}
		w.opaque = true // a subquery reads rows of its own
		if x.Statement.SQL.Len() > 0 {
			// Raw subquery text: its tables unknown; a write if it
			// writes.
			w.unknown = true
			w.fragment(x.Statement.SQL.String(), atSubquery)
			w.vars(x.Statement.Vars, depth+1)
			return
		}
		w.statement(x.Statement, depth+1)
	case clause.Expression:
		w.expr(x, depth+1)
	case []any:
		w.vars(x, depth+1)
	}
}
