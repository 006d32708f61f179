package sharding

import (
	"strconv"

	"github.com/freshread/freshread/sharding/internal/sqltext"
)

// A small tokenizer and boolean-expression parser for the SQL text of
// clause.Expr conditions (Where("user_id = ? AND status = ?", ...)) and of
// the WHERE part of raw statements. It only needs to recognise
//
//	[table.]column = value | value = [table.]column
//	[table.]column IN (value, ...) | [table.]column IN ?
//
// combined with AND, OR, NOT and parentheses. Everything else is an opaque
// predicate, which never narrows the set of shards.

// cond is a node of a condition tree.
type cond struct {
	op     condOp
	kids   []*cond
	column int      // leaf: colKey or colID
	values []int64  // leaf: the values the column is restricted to
	src    *listSrc // leaf of raw text: where its values are written (raw IN splitting)
}

// listSrc is where the values of an "IN (...)", "= ANY($n)" or
// "= ANY(ARRAY[...])" predicate are, in the statement's text.
type listSrc struct {
	param int        // = ANY($n): the index of the array variable; -1 for a list
	elems []listElem // a list: its elements, one value each
}

// listElem is one element of a list.
type listElem struct {
	pos, end int // its bytes in the text
	param    int // its variable's index, or -1 for a literal
	value    int64
}

type condOp uint8

const (
	opOther condOp = iota // says nothing about the shard
	opAnd
	opOr
	opLeaf
)

const (
	colKey = 1
	colID  = 2
)

var otherCond = &cond{op: opOther}

// textParser parses a token slice into a cond tree. vars are the
// statement's variables; "?" tokens consume them in order, "$n" index them.
type textParser struct {
	toks  []sqltext.Tok
	pos   int
	vars  []any
	next  int // next "?" variable
	match columnMatcher
}

// columnMatcher tells whether an identifier names the key or ID column of
// the sharded table (colKey, colID or 0).
type columnMatcher func(ident string) int

func (p *textParser) peek() sqltext.Tok {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return sqltext.Tok{}
}

func (p *textParser) parseOr() *cond {
	left := p.parseAnd()
	for p.peek().Is("or") {
		p.pos++
		right := p.parseAnd()
		left = joinCond(opOr, left, right)
	}
	return left
}

func (p *textParser) parseAnd() *cond {
	left := p.parseNot()
	for p.peek().Is("and") {
		p.pos++
		right := p.parseNot()
		left = joinCond(opAnd, left, right)
	}
	return left
}

func (p *textParser) parseNot() *cond {
	if p.peek().Is("not") {
		p.pos++
		p.parseNot() // consumes its variables
		return otherCond
	}
	return p.parsePrimary()
}

// boundary reports whether t ends a predicate.
func boundary(t sqltext.Tok) bool {
	return t.Kind == 0 || t.Is("and") || t.Is("or") || t.IsOp(")")
}

func (p *textParser) parsePrimary() *cond {
	start := p.pos
	if p.peek().IsOp("(") {
		// A parenthesised boolean expression, unless it is a subquery or is
		// followed by more of a predicate ("(a + b) = ?").
		end := p.matchParen(p.pos)
		inner := p.toks[p.pos+1 : max(end, p.pos+1)]
		if end > 0 && (end+1 >= len(p.toks) || boundary(p.toks[end+1])) &&
			len(inner) > 0 && !inner[0].Is("select") && !inner[0].Is("with") && !inner[0].Is("values") {
			saveNext := p.next
			p.pos++
			c := p.parseOr()
			if p.pos == end {
				p.pos++
				return c
			}
			p.pos, p.next = start, saveNext
		}
	}
	// A predicate: everything up to the next AND/OR/")" at depth 0.
	depth := 0
	for p.pos < len(p.toks) {
		t := p.toks[p.pos]
		if depth == 0 && boundary(t) {
			break
		}
		if t.IsOp("(") {
			depth++
		} else if t.IsOp(")") {
			depth--
		}
		p.pos++
	}
	return p.predicate(p.toks[start:p.pos])
}

func (p *textParser) matchParen(open int) int {
	depth := 0
	for i := open; i < len(p.toks); i++ {
		if p.toks[i].IsOp("(") {
			depth++
		} else if p.toks[i].IsOp(")") {
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// predicate classifies one predicate and consumes its "?" variables.
func (p *textParser) predicate(ts []sqltext.Tok) *cond {
	// Resolve every parameter of the predicate first, in order.
	vals := make([]any, len(ts))
	idxs := make([]int, len(ts))
	for i, t := range ts {
		idxs[i] = -1
		if t.Kind == sqltext.Param {
			idx := t.Param
			if idx < 0 {
				idx = p.next
				p.next++
			}
			idxs[i] = idx
			if idx >= 0 && idx < len(p.vars) {
				vals[i] = p.vars[idx]
			} else {
				vals[i] = missingVar{}
			}
		}
	}
	col := func(i int) int {
		if i < len(ts) && ts[i].Kind == sqltext.Ident {
			return p.match(ts[i].Text)
		}
		return 0
	}
	switch {
	case len(ts) == 3 && ts[1].IsOp("="):
		if c := col(0); c != 0 {
			return leafOf(c, ts[2], vals[2])
		}
		if c := col(2); c != 0 {
			return leafOf(c, ts[0], vals[0])
		}
	case len(ts) >= 3 && ts[1].Is("in") && col(0) != 0:
		c := col(0)
		if len(ts) == 3 && ts[2].Kind == sqltext.Param { // IN ? with a slice
			return leafOf(c, ts[2], vals[2])
		}
		if ts[2].IsOp("(") && ts[len(ts)-1].IsOp(")") {
			return listLeaf(c, ts, vals, idxs, 3, len(ts)-1)
		}
	case len(ts) == 6 && ts[1].IsOp("=") && ts[2].Is("any") && ts[3].IsOp("(") && ts[4].Kind == sqltext.Param && ts[5].IsOp(")") && col(0) != 0:
		// = ANY($n) with an array of keys.
		leaf := leafOf(col(0), ts[4], vals[4])
		if leaf.op == opLeaf {
			leaf.src = &listSrc{param: idxs[4]}
		}
		return leaf
	case len(ts) >= 8 && ts[1].IsOp("=") && ts[2].Is("any") && ts[3].IsOp("(") && ts[4].Is("array") && ts[5].IsOp("[") &&
		ts[len(ts)-2].IsOp("]") && ts[len(ts)-1].IsOp(")") && col(0) != 0:
		// = ANY(ARRAY[v, ...]).
		return listLeaf(col(0), ts, vals, idxs, 6, len(ts)-2)
	}
	return otherCond
}

// listLeaf reads the comma-separated values ts[from:to] of a list on
// column c, each a literal or a parameter.
func listLeaf(c int, ts []sqltext.Tok, vals []any, idxs []int, from, to int) *cond {
	leaf := &cond{op: opLeaf, column: c, src: &listSrc{param: -1}}
	for i := from; i < to; i++ {
		if ts[i].IsOp(",") && i > from {
			continue
		}
		l := leafOf(c, ts[i], vals[i])
		if l.op != opLeaf || (i+1 < to && !ts[i+1].IsOp(",")) {
			return otherCond
		}
		leaf.values = append(leaf.values, l.values...)
		if len(l.values) == 1 && leaf.src != nil {
			leaf.src.elems = append(leaf.src.elems, listElem{pos: ts[i].Pos, end: ts[i].End, param: idxs[i], value: l.values[0]})
		} else {
			leaf.src = nil // a parameter holding several values: not split
		}
	}
	return leaf
}

type missingVar struct{}

// leafOf builds a leaf from a literal or a parameter value.
func leafOf(column int, t sqltext.Tok, v any) *cond {
	switch t.Kind {
	case sqltext.Number:
		n, err := strconv.ParseInt(t.Text, 10, 64)
		if err != nil {
			return otherCond
		}
		return &cond{op: opLeaf, column: column, values: []int64{n}}
	case sqltext.String:
		n, err := strconv.ParseInt(t.Text, 10, 64)
		if err != nil {
			return otherCond
		}
		return &cond{op: opLeaf, column: column, values: []int64{n}}
	case sqltext.Param:
		vs, ok := intValues(v)
		if !ok {
			return otherCond
		}
		return &cond{op: opLeaf, column: column, values: vs}
	}
	return otherCond
}

func joinCond(op condOp, a, b *cond) *cond {
	if a.op == op {
		a.kids = append(a.kids, b)
		return a
	}
	return &cond{op: op, kids: []*cond{a, b}}
}

// parseText parses an SQL boolean expression.
func parseText(sql string, vars []any, match columnMatcher) *cond {
	p := &textParser{toks: sqltext.Lex(sql), vars: vars, match: match}
	c := p.parseOr()
	if p.pos != len(p.toks) {
		return otherCond // unbalanced or not understood: conservative
	}
	return c
}

// rawWhere finds the top-level WHERE of a raw statement and parses its
// condition up to the next top-level clause keyword. It returns otherCond
// when there is no WHERE or the text holds several statements.
func rawWhere(sql string, vars []any, match columnMatcher) *cond {
	toks := sqltext.Lex(sql)
	if rawInsert(toks) {
		// The WHERE of an INSERT is its conflict clause's or its source
		// query's: it pins neither the rows inserted nor the one updated.
		return otherCond
	}
	depth, where := 0, -1
	for i, t := range toks {
		switch {
		case t.IsOp("("):
			depth++
		case t.IsOp(")"):
			depth--
		case t.IsOp(";") && i != len(toks)-1:
			return otherCond
		case depth == 0 && t.Is("where") && where < 0:
			where = i + 1
		}
	}
	if where < 0 {
		return otherCond
	}
	end := len(toks)
	depth = 0
	for i := where; i < len(toks); i++ {
		t := toks[i]
		if t.IsOp("(") {
			depth++
		} else if t.IsOp(")") {
			depth--
		}
		if depth == 0 && (t.Is("group") || t.Is("order") || t.Is("limit") || t.Is("offset") || t.Is("returning") ||
			t.Is("for") || t.Is("union") || t.Is("intersect") || t.Is("except") || t.Is("having") || t.Is("window") ||
			t.Is("fetch") || t.IsOp(";")) {
			end = i
			break
		}
	}
	// "?" placeholders before the WHERE consume variables too.
	before := 0
	for _, t := range toks[:where] {
		if t.Kind == sqltext.Param && t.Param < 0 {
			before++
		}
	}
	p := &textParser{toks: toks[where:end], vars: vars, next: before, match: match}
	c := p.parseOr()
	if p.pos != len(p.toks) {
		return otherCond
	}
	return c
}

// rawInsert reports whether the statement is an INSERT (or MySQL's
// REPLACE), parenthesized or not.
func rawInsert(toks []sqltext.Tok) bool {
	for _, t := range toks {
		if !t.IsOp("(") {
			return t.Is("insert") || t.Is("replace")
		}
	}
	return false
}
