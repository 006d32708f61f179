package merge

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/sharding/internal/sqltext"
)

// A read that needs more than a concatenation is planned here: the
// per-shard statement is rewritten (LIMIT o+c without OFFSET, AVG as SUM
// and COUNT, hidden sort and group columns) and the per-shard results are
// merged in exec.go. What the plan cannot merge correctly is refused with
// ErrUnsupported naming the construct.

// selItem is one item of the select list.
type selItem struct {
	text  string // as written (sent to the shards unless rewritten)
	expr  string // without the alias
	alias string // explicit alias, unquoted ("" if none)
	col   string // the normalized column name when expr is a plain column
	agg   string // count, sum, min, max, avg ("" for none)
	arg   string // the aggregate's argument
}

// outName is the name the database gives the item's result column, when
// it can be told from the text.
func (it selItem) outName() string {
	switch {
	case it.alias != "":
		return it.alias
	case it.col != "":
		return it.col
	case it.agg != "":
		return it.agg
	}
	return ""
}

// orderKey is one ORDER BY item.
type orderKey struct {
	expr       string // identifier as written
	name       string // normalized, unqualified
	qual       string // qualifier ("" if none)
	desc       bool
	nullsFirst bool
	// computed: an expression, not a column (each shard computes it as a
	// hidden column); hidden: 1 + its index among the hidden columns when
	// the result's own columns are not known before it arrives (no select
	// list), 0 otherwise.
	computed bool
	hidden   int
	// where the key is found in the per-shard (row mode) or merged
	// (aggregate mode) row: col >= 0 an index; col < 0 looked up by name
	// at run time.
	col int
}

// Plan is the merge of one multi-shard read (New): what each shard is
// asked for and how their rows combine.
type Plan struct {
	agg      bool // aggregation (aggregates and/or GROUP BY)
	distinct bool
	order    []orderKey
	limit    int // -1: none
	offset   int
	explicit bool      // the statement has a select list
	items    []selItem // the select list (explicit)
	groups   []string  // GROUP BY expressions
	nVis     int       // visible items (items after them are hidden HAVING aggregates)
	having   *havingNode
	selSQL   string // the rewritten select list ("" keeps the statement's)
	nHidden  int    // trailing hidden columns of the per-shard rows
	// aggregate mode: per visible item, the index of its first per-shard
	// column; and the per-shard index of each hidden group column.
	src      []int
	groupCol []int
	afterFnd bool // call AfterFind hooks after the scan
	mysql    bool // MySQL/MariaDB shards: "x" is a string, not a name
	deepOK   bool // a total order of table columns: deep OFFSET in two phases (deep.go)
}

var (
	aggCallRE  = regexp.MustCompile(`(?is)^(count|sum|min|max|avg)\s*\((.*)\)$`)
	aliasRE    = regexp.MustCompile(`(?is)^(.*?)\s+(?:as\s+)?("[^"]+"|[A-Za-z_][A-Za-z0-9_$]*)$`)
	identRE    = regexp.MustCompile("^(?:\"[^\"]+\"|`[^`]+`|[A-Za-z_][A-Za-z0-9_$]*)(?:\\.(?:\"[^\"]+\"|`[^`]+`|[A-Za-z_][A-Za-z0-9_$]*)){0,2}$")
	windowRE   = regexp.MustCompile(`(?i)\bover\s*\(|\bover\s+[a-z_]`)
	distinctRE = regexp.MustCompile(`(?i)\bdistinct\b`)
	sqlWords   = map[string]bool{"from": true, "and": true, "or": true, "not": true, "is": true, "null": true, "then": true, "else": true, "end": true, "asc": true, "desc": true}
)

// Needed reports whether a multi-shard read of stmt needs more than a
// concatenation of the shards' rows into a slice; row: the statement runs
// through GORM's Row chain (Row, Rows, Scan).
func Needed(stmt *gorm.Statement, row bool) bool {
	if row {
		return true
	}
	for _, n := range []string{"ORDER BY", "LIMIT", "GROUP BY"} {
		if _, ok := stmt.Clauses[n]; ok {
			return true
		}
	}
	if stmt.Distinct {
		return true
	}
	if c, ok := stmt.Clauses["SELECT"]; ok && c.Expression != nil {
		return true
	}
	for _, sel := range stmt.Selects {
		if sqltext.Aggregate.MatchString(sel) || distinctRE.MatchString(sel) {
			return true
		}
	}
	d := reflect.ValueOf(stmt.Dest)
	return d.Kind() != reflect.Pointer || d.IsNil() || d.Elem().Kind() != reflect.Slice
}

// New plans the merge of a multi-shard GORM read, or names what it
// cannot merge (why, with a nil Plan).
func New(stmt *gorm.Statement) (*Plan, string) {
	p := &Plan{limit: -1, distinct: stmt.Distinct}
	if c, ok := stmt.Clauses["SELECT"]; ok && c.Expression != nil {
		// An explicit SELECT clause (Count's COUNT(DISTINCT(col)) among
		// them) is written as is: Statement.Distinct does not apply.
		p.distinct = false
	}
	if len(stmt.Preloads) > 0 {
		return nil, "Preload with ORDER BY/LIMIT/aggregates (preload after the merge yourself)"
	}
	if _, ok := stmt.Clauses["FOR"]; ok {
		return nil, "locking clause (FOR UPDATE/SHARE)"
	}
	// Select list.
	items, explicit, distinct, why := selectList(stmt)
	if why != "" {
		return nil, why
	}
	p.explicit, p.distinct = explicit, p.distinct || distinct
	p.mysql = mysqlDialect(stmt)
	for _, text := range items {
		it, why := parseSelItem(text)
		if why != "" {
			return nil, why
		}
		if it.agg != "" {
			p.agg = true
		}
		p.items = append(p.items, it)
	}
	p.nVis = len(p.items)
	if mysqlDialect(stmt) {
		for _, it := range p.items {
			if it.agg == "countd" {
				// Its partial (json_agg ... FILTER) is PostgreSQL's, and
				// the union of the shards' values would compare text
				// by bytes, not by the column's collation.
				return nil, "count(DISTINCT ...) on MySQL or MariaDB shards: " + it.text
			}
		}
	}
	// GROUP BY / HAVING.
	var having []clause.Expression
	if c, ok := stmt.Clauses["GROUP BY"]; ok {
		g, _ := c.Expression.(clause.GroupBy)
		having = g.Having
		for _, col := range g.Columns {
			if col.Raw {
				for _, part := range splitTopLevel(col.Name) {
					if part = strings.TrimSpace(part); part != "" {
						p.groups = append(p.groups, part)
					}
				}
			} else {
				p.groups = append(p.groups, quoteColumn(stmt, col))
			}
		}
		if len(p.groups) > 0 {
			p.agg = true
		}
	}
	if p.agg && p.distinct {
		return nil, "DISTINCT with aggregates or GROUP BY"
	}
	if p.agg && !explicit {
		return nil, "GROUP BY without a select list"
	}
	if len(having) > 0 {
		if !p.agg {
			return nil, "HAVING without GROUP BY or aggregates"
		}
		if why := p.planHaving(having); why != "" {
			return nil, why
		}
	}
	// LIMIT / OFFSET.
	if c, ok := stmt.Clauses["LIMIT"]; ok {
		l, ok := c.Expression.(clause.Limit)
		if !ok {
			return nil, "a LIMIT expression"
		}
		if l.Limit != nil && *l.Limit >= 0 {
			p.limit = *l.Limit
		}
		if l.Offset > 0 {
			p.offset = l.Offset
		}
	}
	// ORDER BY.
	if c, ok := stmt.Clauses["ORDER BY"]; ok {
		ob, ok := c.Expression.(clause.OrderBy)
		if !ok || ob.Expression != nil {
			return nil, "an ORDER BY expression"
		}
		for _, col := range ob.Columns {
			keys, why := orderKeys(stmt, col)
			if why != "" {
				return nil, why
			}
			p.order = append(p.order, keys...)
		}
	}
	if why := explicitCollate(p, having); why != "" {
		return nil, why
	}
	if p.agg {
		if why := p.planAggregate(); why != "" {
			return nil, why
		}
	} else if why := p.planRows(stmt); why != "" {
		return nil, why
	} else {
		p.planDeep(stmt)
	}
	if stmt.Schema != nil && stmt.Schema.AfterFind && !stmt.SkipHooks {
		p.afterFnd = true
	}
	return p, ""
}

// planRows places the ORDER BY keys of a row-mode merge: found by name in
// the result, or added as hidden columns to an explicit select list.
func (p *Plan) planRows(stmt *gorm.Statement) string {
	var hidden []string
	for i := range p.order {
		k := &p.order[i]
		k.col = -1
		if k.computed {
			if p.distinct {
				return fmt.Sprintf("ORDER BY %s with DISTINCT (select it)", k.expr)
			}
			k.name = fmt.Sprintf("__fr_k%d", i)
			if p.explicit {
				k.col = len(p.items) + len(hidden)
			} else {
				k.hidden = 1 + len(hidden)
			}
			hidden = append(hidden, fmt.Sprintf("%s AS \"%s\"", k.expr, k.name))
			continue
		}
		if p.explicit {
			found := false
			for _, it := range p.items {
				if it.outName() == k.name && (k.qual == "" || it.alias == "" && it.col == k.name) {
					found = true
				}
			}
			if !found {
				if p.distinct {
					return fmt.Sprintf("ORDER BY %s not in a DISTINCT select list", k.expr)
				}
				k.col = len(p.items) + len(hidden)
				hidden = append(hidden, fmt.Sprintf("%s AS \"__fr_k%d\"", k.expr, i))
			}
			continue
		}
		if k.qual != "" && !sameTable(k.qual, stmt.Table) {
			return fmt.Sprintf("ORDER BY %s (a column of another table; select it with an alias)", k.expr)
		}
	}
	if len(hidden) > 0 {
		texts := make([]string, 0, len(p.items)+len(hidden))
		for _, it := range p.items {
			texts = append(texts, it.text)
		}
		if !p.explicit {
			texts = append(texts, stmt.Quote(stmt.Table)+".*") // the statement's own columns, then the hidden ones
		}
		p.selSQL = strings.Join(append(texts, hidden...), ", ")
		p.nHidden = len(hidden)
	}
	return ""
}

// planAggregate rewrites the select list for the shards: AVG as SUM and
// COUNT, GROUP BY expressions as hidden columns; ORDER BY keys then name
// merged output columns or group expressions.
func (p *Plan) planAggregate() string {
	var parts []string
	for i, it := range p.items {
		p.src = append(p.src, len(parts))
		if it.agg == "avg" {
			parts = append(parts, fmt.Sprintf("sum(%s) AS \"__fr_s%d\"", it.arg, i), fmt.Sprintf("count(%s) AS \"__fr_c%d\"", it.arg, i))
			continue
		}
		if it.agg == "countd" {
			parts = append(parts, fmt.Sprintf("json_agg(DISTINCT %s) FILTER (WHERE %s IS NOT NULL) AS \"__fr_d%d\"", it.arg, it.arg, i))
			continue
		}
		if it.agg == "" && it.col == "" && sqltext.Aggregate.MatchString(it.expr) {
			return "an aggregate inside an expression: " + it.text
		}
		parts = append(parts, it.text)
	}
	for j, g := range p.groups {
		p.groupCol = append(p.groupCol, len(parts))
		parts = append(parts, fmt.Sprintf("%s AS \"__fr_g%d\"", g, j))
	}
	p.nHidden = len(p.groups)
	p.selSQL = strings.Join(parts, ", ")
	for i := range p.order {
		k := &p.order[i]
		k.col = -1
		for j, it := range p.items {
			if it.outName() == k.name || normExpr(it.expr) == normExpr(k.expr) {
				if k.col >= 0 {
					return fmt.Sprintf("ORDER BY %s is ambiguous", k.expr)
				}
				k.col = j
			}
		}
		if k.col < 0 {
			for j, g := range p.groups {
				if normExpr(g) == normExpr(k.expr) || lastPart(normExpr(g)) == k.name {
					k.col = len(p.items) + j // a hidden group column of the merged row
					break
				}
			}
		}
		if k.col < 0 {
			return fmt.Sprintf("ORDER BY %s is neither an output column nor a GROUP BY expression", k.expr)
		}
	}
	return ""
}

// selectList returns the statement's select list as item texts; explicit
// is false for SELECT * (GORM's default column list).
func selectList(stmt *gorm.Statement) (items []string, explicit, distinct bool, why string) {
	if c, ok := stmt.Clauses["SELECT"]; ok && c.Expression != nil {
		switch e := c.Expression.(type) {
		case clause.Expr:
			sql, ok := inlineColumns(e)
			if !ok {
				return nil, false, false, "a select list with bound parameters"
			}
			if t := strings.TrimSpace(sql); len(t) > 9 && strings.EqualFold(t[:9], "distinct ") {
				distinct, sql = true, t[9:]
			}
			items = splitTopLevel(sql)
		case clause.Select:
			distinct = e.Distinct
			for _, col := range e.Columns {
				if col.Raw {
					items = append(items, splitTopLevel(col.Name)...)
				} else {
					s := quoteColumn(stmt, col)
					if col.Alias != "" {
						s += ` AS "` + col.Alias + `"`
					}
					items = append(items, s)
				}
			}
			if e.Expression != nil {
				return nil, false, false, "a select expression"
			}
		default:
			return nil, false, false, fmt.Sprintf("a select expression %T", c.Expression)
		}
	} else {
		for _, s := range stmt.Selects {
			if stmt.Schema != nil {
				if f := stmt.Schema.LookUpField(s); f != nil {
					items = append(items, quoteIdent(stmt, f.DBName))
					continue
				}
			}
			items = append(items, splitTopLevel(s)...)
		}
	}
	out := items[:0]
	for _, it := range items {
		if it = strings.TrimSpace(it); it != "" {
			out = append(out, it)
		}
	}
	if len(out) == 1 && out[0] == "*" {
		out = nil
	}
	for _, it := range out {
		if it == "*" || strings.HasSuffix(it, ".*") {
			return nil, false, false, "* inside a select list"
		}
	}
	return out, len(out) > 0, distinct, ""
}

// inlineColumns renders an Expr whose variables are all columns (GORM's
// COUNT(?) with clause.Column); other variables cannot be inlined.
func inlineColumns(e clause.Expr) (string, bool) {
	if len(e.Vars) == 0 {
		return e.SQL, true
	}
	var b strings.Builder
	vi := 0
	for i := 0; i < len(e.SQL); i++ {
		if e.SQL[i] != '?' {
			b.WriteByte(e.SQL[i])
			continue
		}
		if vi >= len(e.Vars) {
			return "", false
		}
		col, ok := e.Vars[vi].(clause.Column)
		if !ok || col.Raw && col.Name != "*" {
			return "", false
		}
		vi++
		if col.Name == "*" {
			b.WriteString("*")
		} else {
			b.WriteString(`"` + col.Name + `"`)
		}
	}
	return b.String(), vi == len(e.Vars)
}

func quoteColumn(stmt *gorm.Statement, col clause.Column) string {
	name := col.Name
	if name == clause.PrimaryKey && stmt.Schema != nil && stmt.Schema.PrioritizedPrimaryField != nil {
		name = stmt.Schema.PrioritizedPrimaryField.DBName
	}
	if col.Raw {
		return name
	}
	q := quoteIdent(stmt, name)
	switch col.Table {
	case "":
	case clause.CurrentTable:
		if stmt.Table != "" {
			q = quoteIdent(stmt, stmt.Table) + "." + q
		}
	default:
		q = quoteIdent(stmt, col.Table) + "." + q
	}
	return q
}

// quoteIdent quotes an identifier as the statement's dialect does:
// "name" on PostgreSQL, `name` on MySQL and MariaDB (where "name" is a
// string).
func quoteIdent(stmt *gorm.Statement, name string) string {
	if stmt.DB == nil || stmt.DB.Dialector == nil {
		return `"` + name + `"`
	}
	var b strings.Builder
	stmt.DB.Dialector.QuoteTo(&b, name)
	return b.String()
}

// parseSelItem classifies one select item.
func parseSelItem(text string) (selItem, string) {
	it := selItem{text: text, expr: text}
	if m := aliasRE.FindStringSubmatch(text); m != nil && !sqlWords[strings.ToLower(m[2])] && balanced(m[1]) && strings.TrimSpace(m[1]) != "" {
		// "expr AS alias" or "expr alias" (an identifier after a complete
		// expression).
		e := strings.TrimSpace(m[1])
		if strings.HasSuffix(strings.ToLower(e), " as") {
			e = strings.TrimSpace(e[:len(e)-3])
		}
		if identRE.MatchString(e) || strings.HasSuffix(e, ")") || strings.Contains(strings.ToLower(text), " as ") {
			it.expr, it.alias = e, unquoteIdent(m[2])
		}
	}
	if windowRE.MatchString(it.expr) {
		return it, "a window function: " + text
	}
	if identRE.MatchString(it.expr) {
		it.col = lastPart(normExpr(it.expr))
		return it, ""
	}
	if m := aggCallRE.FindStringSubmatch(it.expr); m != nil && balanced(m[2]) && wholeCall(it.expr) {
		it.agg, it.arg = strings.ToLower(m[1]), strings.TrimSpace(m[2])
		if distinctRE.MatchString(it.arg) {
			inner := strings.TrimSpace(it.arg)
			if it.agg != "count" || len(inner) < 9 || !strings.EqualFold(inner[:9], "distinct ") && !strings.EqualFold(inner[:9], "distinct(") {
				return it, "an aggregate over DISTINCT other than count(DISTINCT expr): " + text
			}
			inner = strings.TrimSpace(inner[8:])
			bare := inner
			for len(bare) > 1 && bare[0] == '(' && wholeCall(bare) {
				bare = strings.TrimSpace(bare[1 : len(bare)-1])
			}
			if distinctRE.MatchString(inner) || sqltext.Aggregate.MatchString(inner) || len(splitTopLevel(bare)) != 1 || bare == "" {
				return it, "count(DISTINCT ...) of several expressions: " + text
			}
			// Exact across shards: each shard sends its distinct values
			// (per group), the merge counts their union.
			it.agg, it.arg = "countd", inner
			return it, ""
		}
		if sqltext.Aggregate.MatchString(it.arg) {
			return it, "a nested aggregate: " + text
		}
		if it.arg == "" || it.agg != "count" && it.arg == "*" {
			return it, "an aggregate without an argument: " + text
		}
		return it, ""
	}
	if sqltext.Aggregate.MatchString(it.expr) {
		if m := sqltext.Aggregate.FindStringSubmatch(it.expr); m != nil {
			switch strings.ToLower(m[1]) {
			case "count", "sum", "min", "max", "avg":
				return it, "an aggregate inside an expression: " + text
			}
		}
		return it, "an aggregate other than COUNT/SUM/MIN/MAX/AVG: " + text
	}
	if distinctRE.MatchString(it.expr) {
		return it, "DISTINCT inside a select item: " + text
	}
	return it, ""
}

// orderKeys parses one ORDER BY column of GORM into keys.
func orderKeys(stmt *gorm.Statement, col clause.OrderByColumn) ([]orderKey, string) {
	if !col.Column.Raw {
		name := col.Column.Name
		if name == clause.PrimaryKey {
			if stmt.Schema == nil || stmt.Schema.PrioritizedPrimaryField == nil {
				return nil, "ORDER BY the primary key of a model without one"
			}
			name = stmt.Schema.PrioritizedPrimaryField.DBName
		}
		k := orderKey{expr: quoteColumn(stmt, col.Column), name: name, desc: col.Desc, nullsFirst: col.Desc}
		if col.Column.Table != "" && col.Column.Table != clause.CurrentTable {
			k.qual = col.Column.Table
		}
		return []orderKey{k}, ""
	}
	var out []orderKey
	for _, part := range splitTopLevel(col.Column.Name) {
		toks := sqltext.Lex(part)
		if len(toks) == 0 {
			continue
		}
		if toks[0].Kind != sqltext.Ident || !orderColumnOnly(toks) {
			k, why := orderExpression(part)
			if why != "" {
				return nil, why
			}
			out = append(out, k)
			continue
		}
		k := orderKey{name: toks[0].Text}
		if i := strings.LastIndexByte(k.name, '.'); i >= 0 {
			k.qual, k.name = k.name[:i], k.name[i+1:]
		}
		rest := toks[1:]
		if len(rest) > 0 && (rest[0].Is("asc") || rest[0].Is("desc")) {
			k.desc = rest[0].Is("desc")
			rest = rest[1:]
		}
		k.nullsFirst = k.desc
		if len(rest) == 2 && rest[0].Is("nulls") && (rest[1].Is("first") || rest[1].Is("last")) {
			k.nullsFirst = rest[1].Is("first")
			rest = nil
		}
		if len(rest) > 0 {
			return nil, "ORDER BY " + strings.TrimSpace(part) + " (only columns and aliases are merged)"
		}
		k.expr = identText(part)
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, "an empty ORDER BY"
	}
	if col.Desc { // GORM writes DESC after the raw text: it applies to the last item
		out[len(out)-1].desc, out[len(out)-1].nullsFirst = true, true
	}
	return out, ""
}

// orderColumnOnly reports whether an ORDER BY item's tokens are a column
// with at most ASC/DESC and NULLS FIRST/LAST after it.
func orderColumnOnly(toks []sqltext.Tok) bool {
	rest := toks[1:]
	if len(rest) > 0 && (rest[0].Is("asc") || rest[0].Is("desc")) {
		rest = rest[1:]
	}
	if len(rest) == 2 && rest[0].Is("nulls") && (rest[1].Is("first") || rest[1].Is("last")) {
		rest = nil
	}
	return len(rest) == 0
}

var orderSuffixRE = regexp.MustCompile(`(?is)^(.*?)(?:\s+(asc|desc))?(?:\s+nulls\s+(first|last))?\s*$`)

// orderExpression parses an ORDER BY item that is an expression
// (`amount + 1 DESC`, `lower(name)`): each shard computes it as a hidden
// column, and the merge compares the values. A position (`ORDER BY 2`)
// is refused: it would name a column of the rewritten select list.
func orderExpression(part string) (orderKey, string) {
	m := orderSuffixRE.FindStringSubmatch(strings.TrimSpace(part))
	expr := ""
	if m != nil {
		expr = strings.TrimSpace(m[1])
	}
	if expr == "" {
		return orderKey{}, "an empty ORDER BY"
	}
	if strings.Trim(expr, "0123456789") == "" {
		return orderKey{}, "ORDER BY " + expr + " (a position; name the column)"
	}
	if strings.Contains(expr, "?") {
		return orderKey{}, "ORDER BY " + expr + " (bound parameters in ORDER BY)"
	}
	k := orderKey{expr: expr, computed: true, desc: strings.EqualFold(m[2], "desc")}
	k.nullsFirst = k.desc
	if m[3] != "" {
		k.nullsFirst = strings.EqualFold(m[3], "first")
	}
	return k, ""
}

// identText returns the leading identifier of an ORDER BY item as written.
func identText(part string) string {
	part = strings.TrimSpace(part)
	f := strings.Fields(part)
	if len(f) == 0 {
		return part
	}
	if strings.Contains(f[0], `"`) && !identRE.MatchString(f[0]) {
		// a quoted name with spaces: keep up to the closing quote
		if i := strings.LastIndexByte(part, '"'); i > 0 {
			return part[:i+1]
		}
	}
	return f[0]
}

// splitTopLevel splits s at commas outside parentheses and quotes.
func splitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ',' && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func balanced(s string) bool {
	depth := 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth < 0 {
				return false
			}
		}
	}
	return depth == 0 && quote == 0
}

// wholeCall: "f(...)" where the first "(" closes at the end.
func wholeCall(s string) bool {
	i := strings.IndexByte(s, '(')
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return j == len(s)-1
			}
		}
	}
	return false
}

// normExpr normalizes an expression for comparison: identifiers unquoted
// and lower-cased (unless quoted), spaces dropped.
func normExpr(s string) string {
	var b strings.Builder
	for _, t := range sqltext.Lex(s) {
		b.WriteString(t.Text)
	}
	return b.String()
}

func lastPart(s string) string {
	if i := strings.LastIndexByte(s, '.'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func unquoteIdent(s string) string {
	if len(s) >= 2 && (s[0] == '"' && s[len(s)-1] == '"' || s[0] == '`' && s[len(s)-1] == '`') {
		return s[1 : len(s)-1]
	}
	return strings.ToLower(s)
}

func sameTable(qual, table string) bool {
	return qual == clause.CurrentTable || sqltext.NormalizeTable(qual) == sqltext.NormalizeTable(table)
}

// rewrite applies the plan to a shard's copy of the statement.
func (p *Plan) rewrite(st *gorm.Statement) {
	if p.selSQL != "" {
		st.Selects = nil
		sql := p.selSQL
		if p.distinct {
			sql = "DISTINCT " + sql
		}
		st.Clauses["SELECT"] = clause.Clause{Name: "SELECT", Expression: clause.Expr{SQL: dialectSQL(st, sql)}}
	}
	if p.agg {
		delete(st.Clauses, "ORDER BY")
		delete(st.Clauses, "LIMIT")
		if c, ok := st.Clauses["GROUP BY"]; ok && p.having != nil {
			g, _ := c.Expression.(clause.GroupBy)
			g.Having = nil // evaluated on the merged groups
			c.Expression = g
			st.Clauses["GROUP BY"] = c
		}
		return
	}
	if _, ok := st.Clauses["LIMIT"]; ok {
		if p.limit >= 0 {
			n := p.limit + p.offset
			st.Clauses["LIMIT"] = clause.Clause{Expression: clause.Limit{Limit: &n}} // Limit writes its own keyword
		} else {
			delete(st.Clauses, "LIMIT")
		}
	}
}

var collateRE = regexp.MustCompile(`(?i)\bcollate\b`)

// explicitCollate names an explicit COLLATE in the select list, GROUP BY,
// HAVING or ORDER BY: the shards would compare that text under a
// collation the read's table does not declare, which the merge cannot
// reproduce (it compares text by its bytes).
func explicitCollate(p *Plan, having []clause.Expression) string {
	texts := append([]string(nil), p.groups...)
	for _, it := range p.items {
		texts = append(texts, it.text)
	}
	for _, k := range p.order {
		texts = append(texts, k.expr)
	}
	for _, h := range having {
		switch x := h.(type) {
		case clause.Expr:
			texts = append(texts, x.SQL)
		case clause.NamedExpr:
			texts = append(texts, x.SQL)
		}
	}
	for _, t := range texts {
		if collateRE.MatchString(t) {
			return fmt.Sprintf("an explicit COLLATE in %q (the merge compares text by its bytes: sort or group by the column's own collation, declared byte order)", t)
		}
	}
	return ""
}

// plainExpr reports whether e names a column of a table (rather than
// computing a value, or naming the alias of a computed select item):
// its text compares by that column's collation. On MySQL and MariaDB a
// double-quoted "x" is a string literal.
func (p *Plan) plainExpr(e string) bool {
	if !p.identExpr(e) {
		return false
	}
	n := unquoteIdent(lastPart(normExpr(strings.TrimSpace(e))))
	for _, it := range p.items {
		if it.alias != "" && it.alias == n && !p.identExpr(it.expr) {
			return false
		}
	}
	return true
}

// identExpr: e is a (qualified) name.
func (p *Plan) identExpr(e string) bool {
	e = strings.TrimSpace(e)
	return identRE.MatchString(e) && !(p.mysql && strings.Contains(e, `"`))
}

// shardExprs names, per column of a shard's row (n columns), the
// expression that computes it; "" for a column of a table.
func (p *Plan) shardExprs(n int) []string {
	out := make([]string, n)
	set := func(c int, e string) {
		if c >= 0 && c < n {
			out[c] = e
		}
	}
	if p.agg {
		for i, it := range p.items {
			switch it.agg {
			case "":
				if !p.plainExpr(it.expr) {
					set(p.src[i], it.expr)
				}
			case "min", "max":
				if !p.plainExpr(it.arg) {
					set(p.src[i], it.expr)
				}
			}
		}
		for j, g := range p.groups {
			if !p.plainExpr(g) {
				set(p.groupCol[j], g)
			}
		}
		return out
	}
	visible := n - p.nHidden
	for i, it := range p.items {
		if i < visible && !p.plainExpr(it.expr) {
			set(i, it.expr)
		}
	}
	for _, k := range p.order {
		switch {
		case k.hidden > 0 && !p.plainExpr(k.expr):
			set(visible+k.hidden-1, k.expr)
		case k.col >= visible && !p.plainExpr(k.expr):
			set(k.col, k.expr)
		}
	}
	return out
}

// mergedExprs is shardExprs for the merged rows of an aggregate: the
// visible items, then the group columns.
func (p *Plan) mergedExprs(shard []string) []string {
	out := make([]string, 0, len(p.items)+len(p.groups))
	for i := range p.items {
		out = append(out, shard[p.src[i]])
	}
	for _, gc := range p.groupCol {
		out = append(out, shard[gc])
	}
	return out
}
