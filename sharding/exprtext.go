package sharding

import (
	"strconv"
	"strings"
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

type tokKind uint8

const (
	tkIdent tokKind = iota + 1 // identifier or keyword (lower-cased unless quoted)
	tkNumber
	tkString
	tkParam // ? (positional, in order) or $n
	tkOp    // operators and punctuation: = <> ( ) , etc.
)

type tok struct {
	kind   tokKind
	text   string // lower-cased for unquoted identifiers
	quoted bool
	param  int // tkParam: index into the variables (-1 for "?": next)
	// pos, end: the token's bytes in the text (raw IN splitting).
	pos, end int
}

func lexSQL(s string) []tok {
	var out []tok
	for i := 0; i < len(s); {
		c := s[i]
		start, n0 := i, len(out)
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				return out
			}
			i += j + 4
		case c == '\'':
			j := i + 1
			for j < len(s) {
				if s[j] == '\'' {
					if j+1 < len(s) && s[j+1] == '\'' {
						j += 2
						continue
					}
					break
				}
				j++
			}
			out = append(out, tok{kind: tkString, text: s[i+1 : min(j, len(s))]})
			i = j + 1
		case c == '"' || c == '`':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return out
			}
			out = appendIdent(out, s[i+1:i+1+j], true)
			i += j + 2
		case c == '?':
			out = append(out, tok{kind: tkParam, param: -1, text: "?"})
			i++
		case c == '$' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			j := i + 1
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			n, _ := strconv.Atoi(s[i+1 : j])
			out = append(out, tok{kind: tkParam, param: n - 1, text: s[i:j]})
			i = j
		case c >= '0' && c <= '9':
			j := i
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.' || s[j] == 'e' || s[j] == 'E') {
				j++
			}
			out = append(out, tok{kind: tkNumber, text: s[i:j]})
			i = j
		case isIdentByte(c):
			j := i
			for j < len(s) && (isIdentByte(s[j]) || s[j] >= '0' && s[j] <= '9' || s[j] == '$') {
				j++
			}
			out = appendIdent(out, strings.ToLower(s[i:j]), false)
			i = j
		case c == '.':
			out = append(out, tok{kind: tkOp, text: "."})
			i++
		default:
			j := i + 1
			if j < len(s) {
				switch s[i : j+1] {
				case "<>", "!=", "<=", ">=", "::", "||":
					j++
				}
			}
			out = append(out, tok{kind: tkOp, text: s[i:j]})
			i = j
		}
		switch n := len(out); {
		case n > n0:
			out[n-1].pos, out[n-1].end = start, i
		case n == n0-1 && n > 0: // a dotted name joined to the one before
			out[n-1].end = i
		}
	}
	return out
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// appendIdent joins dotted names (schema.table.column) into one token whose
// text is the full dotted name.
func appendIdent(out []tok, name string, quoted bool) []tok {
	if n := len(out); n >= 2 && out[n-1].kind == tkOp && out[n-1].text == "." && out[n-2].kind == tkIdent {
		out[n-2].text += "." + name
		out[n-2].quoted = out[n-2].quoted || quoted
		return out[:n-1]
	}
	return append(out, tok{kind: tkIdent, text: name, quoted: quoted})
}

func (t tok) is(word string) bool { return t.kind == tkIdent && !t.quoted && t.text == word }
func (t tok) op(s string) bool    { return t.kind == tkOp && t.text == s }

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
	toks  []tok
	pos   int
	vars  []any
	next  int // next "?" variable
	match columnMatcher
}

// columnMatcher tells whether an identifier names the key or ID column of
// the sharded table (colKey, colID or 0).
type columnMatcher func(ident string) int

func (p *textParser) peek() tok {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return tok{}
}

func (p *textParser) parseOr() *cond {
	left := p.parseAnd()
	for p.peek().is("or") {
		p.pos++
		right := p.parseAnd()
		left = joinCond(opOr, left, right)
	}
	return left
}

func (p *textParser) parseAnd() *cond {
	left := p.parseNot()
	for p.peek().is("and") {
		p.pos++
		right := p.parseNot()
		left = joinCond(opAnd, left, right)
	}
	return left
}

func (p *textParser) parseNot() *cond {
	if p.peek().is("not") {
		p.pos++
		p.parseNot() // consumes its variables
		return otherCond
	}
	return p.parsePrimary()
}

// boundary reports whether t ends a predicate.
func boundary(t tok) bool {
	return t.kind == 0 || t.is("and") || t.is("or") || t.op(")")
}

func (p *textParser) parsePrimary() *cond {
	start := p.pos
	if p.peek().op("(") {
		// A parenthesised boolean expression, unless it is a subquery or is
		// followed by more of a predicate ("(a + b) = ?").
		end := p.matchParen(p.pos)
		inner := p.toks[p.pos+1 : max(end, p.pos+1)]
		if end > 0 && (end+1 >= len(p.toks) || boundary(p.toks[end+1])) &&
			len(inner) > 0 && !inner[0].is("select") && !inner[0].is("with") && !inner[0].is("values") {
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
		if t.op("(") {
			depth++
		} else if t.op(")") {
			depth--
		}
		p.pos++
	}
	return p.predicate(p.toks[start:p.pos])
}

func (p *textParser) matchParen(open int) int {
	depth := 0
	for i := open; i < len(p.toks); i++ {
		if p.toks[i].op("(") {
			depth++
		} else if p.toks[i].op(")") {
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// predicate classifies one predicate and consumes its "?" variables.
func (p *textParser) predicate(ts []tok) *cond {
	// Resolve every parameter of the predicate first, in order.
	vals := make([]any, len(ts))
	idxs := make([]int, len(ts))
	for i, t := range ts {
		idxs[i] = -1
		if t.kind == tkParam {
			idx := t.param
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
		if i < len(ts) && ts[i].kind == tkIdent {
			return p.match(ts[i].text)
		}
		return 0
	}
	switch {
	case len(ts) == 3 && ts[1].op("="):
		if c := col(0); c != 0 {
			return leafOf(c, ts[2], vals[2])
		}
		if c := col(2); c != 0 {
			return leafOf(c, ts[0], vals[0])
		}
	case len(ts) >= 3 && ts[1].is("in") && col(0) != 0:
		c := col(0)
		if len(ts) == 3 && ts[2].kind == tkParam { // IN ? with a slice
			return leafOf(c, ts[2], vals[2])
		}
		if ts[2].op("(") && ts[len(ts)-1].op(")") {
			return listLeaf(c, ts, vals, idxs, 3, len(ts)-1)
		}
	case len(ts) == 6 && ts[1].op("=") && ts[2].is("any") && ts[3].op("(") && ts[4].kind == tkParam && ts[5].op(")") && col(0) != 0:
		// = ANY($n) with an array of keys.
		leaf := leafOf(col(0), ts[4], vals[4])
		if leaf.op == opLeaf {
			leaf.src = &listSrc{param: idxs[4]}
		}
		return leaf
	case len(ts) >= 8 && ts[1].op("=") && ts[2].is("any") && ts[3].op("(") && ts[4].is("array") && ts[5].op("[") &&
		ts[len(ts)-2].op("]") && ts[len(ts)-1].op(")") && col(0) != 0:
		// = ANY(ARRAY[v, ...]).
		return listLeaf(col(0), ts, vals, idxs, 6, len(ts)-2)
	}
	return otherCond
}

// listLeaf reads the comma-separated values ts[from:to] of a list on
// column c, each a literal or a parameter.
func listLeaf(c int, ts []tok, vals []any, idxs []int, from, to int) *cond {
	leaf := &cond{op: opLeaf, column: c, src: &listSrc{param: -1}}
	for i := from; i < to; i++ {
		if ts[i].op(",") && i > from {
			continue
		}
		l := leafOf(c, ts[i], vals[i])
		if l.op != opLeaf || (i+1 < to && !ts[i+1].op(",")) {
			return otherCond
		}
		leaf.values = append(leaf.values, l.values...)
		if len(l.values) == 1 && leaf.src != nil {
			leaf.src.elems = append(leaf.src.elems, listElem{pos: ts[i].pos, end: ts[i].end, param: idxs[i], value: l.values[0]})
		} else {
			leaf.src = nil // a parameter holding several values: not split
		}
	}
	return leaf
}

type missingVar struct{}

// leafOf builds a leaf from a literal or a parameter value.
func leafOf(column int, t tok, v any) *cond {
	switch t.kind {
	case tkNumber:
		n, err := strconv.ParseInt(t.text, 10, 64)
		if err != nil {
			return otherCond
		}
		return &cond{op: opLeaf, column: column, values: []int64{n}}
	case tkString:
		n, err := strconv.ParseInt(t.text, 10, 64)
		if err != nil {
			return otherCond
		}
		return &cond{op: opLeaf, column: column, values: []int64{n}}
	case tkParam:
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
	p := &textParser{toks: lexSQL(sql), vars: vars, match: match}
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
	toks := lexSQL(sql)
	depth, where := 0, -1
	for i, t := range toks {
		switch {
		case t.op("("):
			depth++
		case t.op(")"):
			depth--
		case t.op(";") && i != len(toks)-1:
			return otherCond
		case depth == 0 && t.is("where") && where < 0:
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
		if t.op("(") {
			depth++
		} else if t.op(")") {
			depth--
		}
		if depth == 0 && (t.is("group") || t.is("order") || t.is("limit") || t.is("offset") || t.is("returning") ||
			t.is("for") || t.is("union") || t.is("intersect") || t.is("except") || t.is("having") || t.is("window") ||
			t.is("fetch") || t.op(";")) {
			end = i
			break
		}
	}
	// "?" placeholders before the WHERE consume variables too.
	before := 0
	for _, t := range toks[:where] {
		if t.kind == tkParam && t.param < 0 {
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
