package sharding

import (
	"strconv"
	"strings"

	"github.com/freshread/freshread/sharding/internal/sqltext"
)

// Statements the router must see whole: set operations (UNION,
// INTERSECT, EXCEPT), CTEs (WITH, WITH RECURSIVE, data-modifying ones),
// joins, subqueries and several statements in one text. The router sends
// a statement whole to one database, so every reference to a sharded
// table in it must be pinned to that database by its own key (or ID),
// or the statement must be one whose per-shard answers add up to the
// whole answer (a single SELECT whose sharded tables are all joined on
// the shard key). whole.go reads the statement into blocks and table
// references; wholedecide.go decides.

// wRef is one table reference of a statement.
type wRef struct {
	name  string     // the table, normalized
	qual  string     // what its columns are qualified with: its alias, or its name
	t     *tableInfo // nil: not a sharded table
	block *wBlock
	join  joinKind
	on    tokSpan  // its ON condition (join kinds with one)
	using []string // its USING (columns) list, lower case
	write bool     // INSERT INTO / UPDATE / DELETE FROM target
	ins   bool     // INSERT INTO target
}

type joinKind uint8

const (
	joinFirst joinKind = iota // the first table of a FROM, or after a comma
	joinInner
	joinLeft  // LEFT JOIN: its ON constrains only this table
	joinOther // RIGHT / FULL JOIN: its ON constrains no table alone
)

// tokSpan is a token range [from, to).
type tokSpan struct{ from, to int }

// wBlock is one query block: a SELECT, UPDATE, DELETE or INSERT of its
// own (an operand of a set operation, a CTE body, a subquery).
type wBlock struct {
	tokSpan
	refs  []*wRef
	where tokSpan
	outer *wBlock // the block whose text holds this one (nil at the top, and for CTE bodies)
	label string  // for messages: "UNION part 2", "CTE u", "subquery"
}

// wStmt is a statement read into blocks.
type wStmt struct {
	toks     []sqltext.Tok
	closing  []int // closing[i]: the matching ")" of the "(" at i, or -1
	blocks   []*wBlock
	ctes     map[string]bool
	compound bool // set operation, CTE, subquery, join, several tables or statements
	// unionAll: a UNION ALL joins two operands; otherSetOp: another set
	// operation (UNION, INTERSECT, EXCEPT) or ";" does.
	unionAll, otherSetOp bool
	failed               string // why the text could not be read ("" when it could)
}

// Keywords that end a table reference's alias, or the FROM list.
var (
	notAlias = toWordSet("where join inner left right full cross natural on using group order having limit offset returning set union intersect except window for fetch values select default tablesample lateral outer straight_join partition use force ignore into from when then as")
	fromEnd  = toWordSet("where group order having limit offset returning set window for fetch select values union intersect except on")
	whereEnd = toWordSet("group order limit offset returning for union intersect except having window fetch")
	subStart = toWordSet("select with values insert update delete table")
)

func toWordSet(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

func isWord(t sqltext.Tok, set map[string]bool) bool {
	return t.Kind == sqltext.Ident && !t.Quoted && set[t.Text]
}

// readWhole reads sql into blocks. tables are the sharded tables.
func readWhole(sql string, tables map[string]*tableInfo) *wStmt {
	st := &wStmt{toks: sqltext.Lex(sql), ctes: map[string]bool{}}
	st.closing = make([]int, len(st.toks))
	var stack []int
	for i, t := range st.toks {
		st.closing[i] = -1
		switch {
		case t.IsOp("("):
			stack = append(stack, i)
		case t.IsOp(")"):
			if len(stack) == 0 {
				st.failed = "unbalanced parentheses"
				return st
			}
			st.closing[stack[len(stack)-1]] = i
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 {
		st.failed = "unbalanced parentheses"
		return st
	}
	end := len(st.toks)
	for end > 0 && st.toks[end-1].IsOp(";") {
		end--
	}
	st.scope(0, end, nil, "")
	refs := 0
	for _, b := range st.blocks {
		refs += len(b.refs)
	}
	if len(st.blocks) > 1 || refs > 1 {
		st.compound = true
	}
	for name := range st.ctes {
		if tables[name] != nil {
			st.failed = "a CTE named like the sharded table " + name
		}
	}
	for _, b := range st.blocks {
		for _, r := range b.refs {
			if st.ctes[r.name] {
				r.t = nil
			} else {
				r.t = tables[r.name]
			}
		}
	}
	return st
}

// subquery reports whether the "(" at i opens a subquery (or a
// parenthesized operand of one: "((SELECT ...) UNION ...)").
func (st *wStmt) subquery(i int) bool {
	for j := i + 1; j < len(st.toks); j++ {
		t := st.toks[j]
		if t.IsOp("(") {
			continue
		}
		return isWord(t, subStart)
	}
	return false
}

// scope reads the tokens [from, to) holding one statement (with its set
// operations and CTEs); outer is the block whose text holds it.
func (st *wStmt) scope(from, to int, outer *wBlock, label string) {
	toks := st.toks
	i := from
	if i < to && toks[i].Is("with") {
		st.compound = true
		i++
		if i < to && toks[i].Is("recursive") {
			i++
		}
		for i < to && toks[i].Kind == sqltext.Ident {
			name := sqltext.NormalizeTable(toks[i].Text)
			st.ctes[name] = true
			i++
			if i < to && toks[i].IsOp("(") && st.closing[i] > 0 {
				i = st.closing[i] + 1 // the column list
			}
			for i < to && (toks[i].Is("as") || toks[i].Is("not") || toks[i].Is("materialized")) {
				i++
			}
			if i >= to || !toks[i].IsOp("(") || st.closing[i] < 0 {
				st.failed = "a WITH clause it cannot read"
				return
			}
			c := st.closing[i]
			st.scope(i+1, c, nil, "CTE "+name)
			i = c + 1
			// SEARCH / CYCLE clauses of a recursive CTE.
			for i < to && !toks[i].IsOp(",") && !isWord(toks[i], subStart) && !toks[i].IsOp("(") {
				i++
			}
			if i < to && toks[i].IsOp(",") {
				i++
				continue
			}
			break
		}
	}
	if i > from && label == "" {
		label = "the main statement"
	}
	// Operands of set operations and statements separated by ";".
	type operand struct {
		tokSpan
		stmt bool // separated by ";" rather than a set operation
	}
	var ops []operand
	start, stmtSep := i, false
	for j := i; j < to; j++ {
		t := toks[j]
		if t.IsOp("(") && st.closing[j] > 0 {
			j = st.closing[j]
			continue
		}
		if !(t.Is("union") || t.Is("intersect") || t.Is("except") || t.IsOp(";")) {
			continue
		}
		st.compound = true
		ops = append(ops, operand{tokSpan{start, j}, stmtSep})
		stmtSep = t.IsOp(";")
		if t.Is("union") && j+1 < to && toks[j+1].Is("all") {
			st.unionAll = true
		} else {
			st.otherSetOp = true
		}
		k := j + 1
		for k < to && (toks[k].Is("all") || toks[k].Is("distinct")) {
			k++
		}
		start, j = k, k-1
	}
	ops = append(ops, operand{tokSpan{start, to}, stmtSep})
	for n, o := range ops {
		l := label
		if len(ops) > 1 {
			what := "part"
			if o.stmt || (n+1 < len(ops) && ops[n+1].stmt) {
				what = "statement"
			}
			l = strings.TrimSpace(label+" "+what) + " " + strconv.Itoa(n+1)
		}
		st.block(o.from, o.to, outer, l)
	}
}

// block reads one query block [from, to).
func (st *wStmt) block(from, to int, outer *wBlock, label string) {
	if from >= to {
		return
	}
	toks := st.toks
	if toks[from].IsOp("(") && st.closing[from] == to-1 && st.subquery(from) {
		st.scope(from+1, to-1, outer, label) // a parenthesized operand
		return
	}
	b := &wBlock{tokSpan: tokSpan{from, to}, outer: outer, label: label}
	st.blocks = append(st.blocks, b)
	first := toks[from]
	insert := first.Is("insert") || first.Is("replace") || first.Is("merge")
	inFrom := false
	var last *wRef
	var jk joinKind
	expectTable := false
	for i := from; i < to; i++ {
		t := toks[i]
		if expectTable {
			expectTable = false
			r, next := st.tableRef(i, to, b, jk, insert && b.refs == nil)
			if r != nil {
				r.write = (first.Is("update") || first.Is("delete") || insert) && b.refs == nil
				r.ins = insert && b.refs == nil
				b.refs = append(b.refs, r)
				last = r
			}
			i = next - 1
			continue
		}
		if t.IsOp("(") && st.closing[i] > 0 {
			c := st.closing[i]
			st.nested(i, c, b)
			if i > from && toks[i-1].Is("using") && last != nil && !st.subquery(i) {
				for _, u := range toks[i+1 : c] {
					if u.Kind == sqltext.Ident {
						last.using = append(last.using, strings.ToLower(u.Text))
					}
				}
			}
			i = c
			continue
		}
		if t.Kind == sqltext.Op {
			if t.Text == "," && inFrom {
				expectTable, jk = true, joinFirst
			}
			continue
		}
		if t.Kind != sqltext.Ident || t.Quoted {
			continue
		}
		switch w := t.Text; {
		case w == "from":
			if i > from && toks[i-1].Is("distinct") {
				continue // IS [NOT] DISTINCT FROM
			}
			expectTable, inFrom, jk = true, true, joinFirst
		case w == "join" || w == "straight_join":
			expectTable, inFrom = true, true
			jk = joinInner
			for k := i - 1; k >= from && k >= i-2; k-- {
				switch {
				case toks[k].Is("left"):
					jk = joinLeft
				case toks[k].Is("right") || toks[k].Is("full"):
					jk = joinOther
				}
			}
		case w == "update" && i == from, w == "into" && insert:
			expectTable, jk = true, joinFirst
		case w == "using" && i+1 < to && !(toks[i+1].IsOp("(") && !st.subquery(i+1)):
			expectTable, inFrom, jk = true, true, joinFirst // DELETE ... USING, MERGE ... USING
		case w == "on" && last != nil && inFrom:
			if i+1 < to && (toks[i+1].Is("conflict") || toks[i+1].Is("duplicate")) {
				inFrom = false
				continue
			}
			e := st.clauseEnd(i+1, to, true)
			last.on = tokSpan{i + 1, e}
			st.nestedRange(i+1, e, b)
			i = e - 1
		case w == "where":
			e := st.clauseEnd(i+1, to, false)
			if b.where.to == 0 {
				b.where = tokSpan{i + 1, e}
			}
			inFrom = false
			st.nestedRange(i+1, e, b)
			i = e - 1
		case fromEnd[w]:
			inFrom = false
		}
	}
}

// clauseEnd is where a WHERE (or, with on, an ON) condition starting at i
// ends: the next clause keyword at its depth.
func (st *wStmt) clauseEnd(i, to int, on bool) int {
	for ; i < to; i++ {
		t := st.toks[i]
		if t.IsOp("(") && st.closing[i] > 0 {
			i = st.closing[i]
			continue
		}
		if isWord(t, whereEnd) || t.IsOp(";") {
			return i
		}
		if on && (t.IsOp(",") || t.Is("join") || t.Is("inner") || t.Is("left") || t.Is("right") || t.Is("full") ||
			t.Is("cross") || t.Is("natural") || t.Is("where") || t.Is("straight_join") || t.Is("set")) {
			return i
		}
	}
	return to
}

// nested reads the subqueries inside the parentheses at open..close.
func (st *wStmt) nested(open, close int, b *wBlock) {
	if st.subquery(open) {
		st.compound = true
		st.scope(open+1, close, b, "subquery")
		return
	}
	st.nestedRange(open+1, close, b)
}

// nestedRange reads the subqueries inside [from, to).
func (st *wStmt) nestedRange(from, to int, b *wBlock) {
	for i := from; i < to; i++ {
		if st.toks[i].IsOp("(") && st.closing[i] > 0 {
			st.nested(i, st.closing[i], b)
			i = st.closing[i]
		}
	}
}

// tableRef reads a table reference at i; it returns the reference (nil
// for a derived table or a table function) and where it ends. target: an
// INSERT's table, which a column list may follow.
func (st *wStmt) tableRef(i, to int, b *wBlock, jk joinKind, target bool) (*wRef, int) {
	toks := st.toks
	for i < to && (toks[i].Is("only") || toks[i].Is("lateral")) {
		i++
	}
	if i >= to {
		return nil, i
	}
	if toks[i].IsOp("(") && st.closing[i] > 0 {
		// A derived table or a parenthesized join.
		c := st.closing[i]
		if st.subquery(i) {
			st.nested(i, c, b)
		} else {
			st.failed = "a parenthesized join"
		}
		return nil, st.skipAlias(c+1, to)
	}
	if toks[i].Kind != sqltext.Ident || (!toks[i].Quoted && notAlias[toks[i].Text]) {
		return nil, i
	}
	if i+1 < to && toks[i+1].IsOp("(") && st.closing[i+1] > 0 && !target {
		// A table function: generate_series(...), unnest(...).
		st.nested(i+1, st.closing[i+1], b)
		return nil, st.skipAlias(st.closing[i+1]+1, to)
	}
	r := &wRef{name: sqltext.NormalizeTable(toks[i].Text), block: b, join: jk}
	r.qual = toks[i].Text
	if k := strings.LastIndexByte(r.qual, '.'); k >= 0 {
		r.qual = r.qual[k+1:]
	}
	j := i + 1
	if j < to && toks[j].Is("as") {
		j++
	}
	if j < to && toks[j].Kind == sqltext.Ident && (toks[j].Quoted || !notAlias[toks[j].Text]) {
		r.qual = toks[j].Text
		j++
		if j < to && toks[j].IsOp("(") && st.closing[j] > 0 {
			j = st.closing[j] + 1 // column aliases
		}
	}
	return r, j
}

// skipAlias skips the alias (and column aliases) after a derived table.
func (st *wStmt) skipAlias(j, to int) int {
	toks := st.toks
	if j < to && toks[j].Is("as") {
		j++
	}
	if j < to && toks[j].Kind == sqltext.Ident && (toks[j].Quoted || !notAlias[toks[j].Text]) {
		j++
		if j < to && toks[j].IsOp("(") && st.closing[j] > 0 {
			j = st.closing[j] + 1
		}
	}
	return j
}
