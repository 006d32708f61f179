package depgraph

import (
	"strings"
)

// This file splits a function body (PL/pgSQL or SQL) into statements and
// says, for each, which SQL text to give the classifier and which
// functions it calls. It is a lexer plus a flat splitter, not a PL/pgSQL
// parser: block structure (IF ... THEN, LOOP, BEGIN ... END, EXCEPTION
// WHEN ... THEN) only separates statements, and anything it does not
// recognise makes the function write "everything".

type tokKind uint8

const (
	tIdent  tokKind = iota // identifier or keyword; low is lower-cased unless quoted
	tQIdent                // "quoted identifier"
	tString                // '...', E'...', $$...$$ and friends
	tNumber
	tParam // $1
	tOp
)

type token struct {
	kind       tokKind
	low        string // lower-cased identifier, unquoted name, or the operator
	start, end int    // byte offsets in the body
}

func (t token) is(kw string) bool { return t.kind == tIdent && t.low == kw }
func (t token) op(o string) bool  { return t.kind == tOp && t.low == o }

// nest is the parenthesis depth after t, depth before it.
func (t token) nest(depth int) int {
	switch {
	case t.op("("):
		return depth + 1
	case t.op(")"):
		return depth - 1
	}
	return depth
}

func isIdentStart(c byte) bool {
	return c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || c >= 0x80
}

func isIdentChar(c byte) bool { return isIdentStart(c) || ('0' <= c && c <= '9') || c == '$' }

// lex splits s into tokens, dropping white space and comments. It never
// fails: an unterminated string or comment runs to the end of s.
func lex(s string) []token {
	var toks []token
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			depth := 0
			for i < len(s) {
				if s[i] == '/' && i+1 < len(s) && s[i+1] == '*' {
					depth++
					i += 2
				} else if s[i] == '*' && i+1 < len(s) && s[i+1] == '/' {
					depth--
					i += 2
					if depth == 0 {
						break
					}
				} else {
					i++
				}
			}
		case c == '\'' || ((c == 'e' || c == 'E') && i+1 < len(s) && s[i+1] == '\''):
			start := i
			escapes := c != '\''
			if escapes {
				i++
			}
			i++
			for i < len(s) {
				if escapes && s[i] == '\\' {
					i += 2
					continue
				}
				if s[i] == '\'' {
					if i+1 < len(s) && s[i+1] == '\'' {
						i += 2
						continue
					}
					i++
					break
				}
				i++
			}
			toks = append(toks, token{kind: tString, start: start, end: min(i, len(s))})
		case c == '"':
			start := i
			i++
			var b strings.Builder
			for i < len(s) {
				if s[i] == '"' {
					if i+1 < len(s) && s[i+1] == '"' {
						b.WriteByte('"')
						i += 2
						continue
					}
					i++
					break
				}
				b.WriteByte(s[i])
				i++
			}
			toks = append(toks, token{kind: tQIdent, low: b.String(), start: start, end: min(i, len(s))})
		case c == '$' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			start := i
			i++
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i++
			}
			toks = append(toks, token{kind: tParam, start: start, end: i})
		case c == '$':
			// $tag$ ... $tag$
			j := i + 1
			for j < len(s) && s[j] != '$' && isIdentChar(s[j]) {
				j++
			}
			if j < len(s) && s[j] == '$' {
				tag := s[i : j+1]
				end := strings.Index(s[j+1:], tag)
				start := i
				if end < 0 {
					i = len(s)
				} else {
					i = j + 1 + end + len(tag)
				}
				toks = append(toks, token{kind: tString, start: start, end: i})
			} else {
				toks = append(toks, token{kind: tOp, low: "$", start: i, end: i + 1})
				i++
			}
		case '0' <= c && c <= '9':
			start := i
			for i < len(s) && (('0' <= s[i] && s[i] <= '9') || s[i] == '.' && !(i+1 < len(s) && s[i+1] == '.') || s[i] == 'e' || s[i] == 'E' || s[i] == '_') {
				i++
			}
			toks = append(toks, token{kind: tNumber, start: start, end: i})
		case isIdentStart(c):
			start := i
			for i < len(s) && isIdentChar(s[i]) {
				i++
			}
			toks = append(toks, token{kind: tIdent, low: strings.ToLower(s[start:i]), start: start, end: i})
		default:
			start := i
			two := ""
			if i+1 < len(s) {
				two = s[i : i+2]
			}
			switch two {
			case ":=", "::", "..", "<<", ">>", "=>", "<=", ">=", "<>", "!=", "||":
				i += 2
				toks = append(toks, token{kind: tOp, low: two, start: start, end: i})
			default:
				i++
				toks = append(toks, token{kind: tOp, low: s[start:i], start: start, end: i})
			}
		}
	}
	return toks
}

// segment is one statement, or one expression of a control structure
// (an IF condition, a declaration), of a function body.
type segment struct {
	toks    []token
	declare bool // in a DECLARE section
}

// splitSegments splits a tokenized body into segments: at semicolons and at
// the PL/pgSQL block keywords outside parentheses and CASE expressions.
func splitSegments(toks []token) []segment {
	var segs []segment
	depth, caseDepth := 0, 0
	declare := false
	start := 0
	merge := false // a MERGE statement: WHEN/THEN/ELSE belong to it
	flush := func(end, next int) {
		if end > start {
			segs = append(segs, segment{toks: toks[start:end], declare: declare})
		}
		start = next
		merge = false
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.op("(") || t.op("["):
			depth++
			continue
		case t.op(")") || t.op("]"):
			if depth > 0 {
				depth--
			}
			continue
		}
		if depth > 0 {
			continue
		}
		if t.op(";") {
			flush(i, i+1)
			caseDepth = 0
			continue
		}
		if t.kind != tIdent {
			continue
		}
		if i == start && t.low == "merge" {
			merge = true
		}
		switch t.low {
		case "case":
			if i != start {
				caseDepth++
			}
		case "end":
			if caseDepth > 0 {
				caseDepth--
				continue
			}
			flush(i, i+1)
			// END IF, END LOOP, END CASE, END label
			for i+1 < len(toks) && (toks[i+1].kind == tIdent || toks[i+1].kind == tQIdent) {
				i++
				start = i + 1
			}
		case "then", "else":
			if caseDepth > 0 || merge {
				continue
			}
			flush(i, i+1)
		case "when":
			if caseDepth > 0 || merge {
				continue
			}
			flush(i, i) // WHEN cond: the next segment starts with WHEN
		case "elsif", "elseif":
			flush(i, i)
		case "loop":
			flush(i, i+1)
		case "declare":
			flush(i, i+1)
			declare = true
		case "begin":
			// BEGIN opens a block; in a SQL function body it may be BEGIN
			// ATOMIC.
			flush(i, i+1)
			declare = false
			if i+1 < len(toks) && toks[i+1].is("atomic") {
				i++
				start = i + 1
			}
		case "exception":
			// RAISE EXCEPTION is a RAISE statement, not a handler section.
			if i > start && toks[i-1].is("raise") {
				continue
			}
			flush(i, i+1)
		}
	}
	flush(len(toks), len(toks))
	return segs
}

// sqlCommands are the first words of SQL commands a function body may run.
var sqlCommands = map[string]bool{
	"insert": true, "update": true, "delete": true, "merge": true, "select": true, "with": true,
	"values": true, "table": true, "truncate": true, "copy": true, "create": true, "alter": true,
	"drop": true, "grant": true, "revoke": true, "comment": true, "refresh": true, "reindex": true,
	"cluster": true, "vacuum": true, "analyze": true, "analyse": true, "lock": true, "import": true,
	"security": true, "reset": true, "set": true, "listen": true, "notify": true, "unlisten": true,
	"discard": true, "prepare": true, "deallocate": true, "savepoint": true, "release": true,
	"commit": true, "rollback": true, "abort": true, "start": true, "do": true, "explain": true,
	"show": true, "checkpoint": true, "load": true, "reassign": true, "declare": true,
}

// exprStatements are PL/pgSQL statements (or block heads) whose text holds
// only expressions: they write nothing themselves but may call functions.
var exprStatements = map[string]bool{
	"if": true, "elsif": true, "elseif": true, "while": true, "when": true, "case": true,
	"raise": true, "assert": true, "exit": true, "continue": true, "null": true, "fetch": true,
	"move": true, "close": true, "get": true, "return": true, "foreach": true, "else": true,
	"then": true, "loop": true, "end": true,
}

// stmt is what one segment does.
type stmt struct {
	sql     string   // SQL to classify ("" when none)
	calls   []string // names of functions called (lower case, maybe schema-qualified)
	dynamic string   // non-empty: the reason the statement is not understood
}

// harmless are built-in functions with side effects that write no table;
// they are replaced by a read-only function before classification.
var harmless = map[string]bool{
	"pg_notify": true, "txid_current": true, "pg_current_xact_id": true, "set_config": true,
	"nextval": true, "setval": true,
}

// analyzeSegment says what seg of body does.
func analyzeSegment(body string, seg segment) stmt {
	toks := seg.toks
	// <<label>>
	for len(toks) >= 3 && toks[0].op("<<") && toks[2].op(">>") {
		toks = toks[3:]
	}
	if len(toks) == 0 {
		return stmt{}
	}
	st := stmt{calls: calls(toks)}
	if seg.declare {
		return st
	}
	first := toks[0]
	text := func(from int) string {
		if from >= len(toks) {
			return ""
		}
		return sqlText(body, toks[from:])
	}
	switch {
	case first.kind != tIdent:
		if len(toks) > 1 && (toks[1].op(":=") || toks[1].op("=")) {
			return st // "quoted" := expr
		}
		st.dynamic = "unrecognised statement " + short(text(0))
		return st
	case first.low == "execute":
		st.dynamic = "EXECUTE (dynamic SQL)"
		return st
	case first.low == "perform":
		st.sql = "SELECT " + text(1)
		return st
	case first.low == "call":
		return st // the procedure is followed through calls
	case first.low == "return":
		if len(toks) > 1 && toks[1].is("query") {
			if len(toks) > 2 && toks[2].is("execute") {
				st.dynamic = "RETURN QUERY EXECUTE (dynamic SQL)"
				return st
			}
			st.sql = stripInto(body, toks[2:])
		}
		return st
	case first.low == "for" || first.low == "open":
		// FOR target IN query / FOR i IN 1..n / OPEN c FOR query
		kw := "in"
		if first.low == "open" {
			kw = "for"
		}
		for j := 1; j < len(toks); j++ {
			if toks[j].is(kw) {
				if j+1 < len(toks) && toks[j+1].is("execute") {
					st.dynamic = strings.ToUpper(first.low) + " ... EXECUTE (dynamic SQL)"
					return st
				}
				if j+1 < len(toks) && toks[j+1].kind == tIdent && sqlCommands[toks[j+1].low] {
					st.sql = stripInto(body, toks[j+1:])
				}
				return st
			}
		}
		return st
	case len(toks) > 1 && (toks[1].op(":=") || toks[1].op("=") || toks[1].op(".") || toks[1].op("[")):
		return st // assignment (x := ..., NEW.col := ..., a[i] := ...)
	case sqlCommands[first.low]:
		st.sql = stripInto(body, toks)
		return st
	case exprStatements[first.low]:
		return st
	}
	st.dynamic = "unrecognised statement " + short(text(0))
	return st
}

// calls returns the names called in toks: an identifier (maybe
// schema-qualified) followed by "(".
func calls(toks []token) []string {
	var out []string
	for i := 0; i+1 < len(toks); i++ {
		if !toks[i+1].op("(") || (toks[i].kind != tIdent && toks[i].kind != tQIdent) {
			continue
		}
		name := toks[i].low
		if i >= 2 && toks[i-1].op(".") && (toks[i-2].kind == tIdent || toks[i-2].kind == tQIdent) {
			name = toks[i-2].low + "." + name
		}
		out = append(out, name)
	}
	return out
}

// sqlText rebuilds the SQL of toks from body, replacing harmless side-effect
// functions by a read-only one.
func sqlText(body string, toks []token) string {
	var b strings.Builder
	for i, t := range toks {
		if i > 0 {
			b.WriteByte(' ')
		}
		if t.kind == tIdent && harmless[t.low] && i+1 < len(toks) && toks[i+1].op("(") {
			b.WriteString("greatest")
			continue
		}
		b.WriteString(body[t.start:t.end])
	}
	return b.String()
}

// stripInto returns the SQL of toks without PL/pgSQL's INTO target clause
// (SELECT ... INTO [STRICT] v, w FROM ...; INSERT ... RETURNING id INTO v),
// which the classifier would take for SELECT INTO a new table.
func stripInto(body string, toks []token) string {
	if len(toks) == 0 {
		return ""
	}
	first := toks[0].low
	depth := 0
	returning := false
	for i, t := range toks {
		depth = t.nest(depth)
		if depth != 0 || t.kind != tIdent {
			continue
		}
		if t.low == "returning" {
			returning = true
		}
		if t.low != "into" {
			continue
		}
		isTarget := false
		switch first {
		case "select", "with", "perform":
			isTarget = i == 0 || !toks[i-1].is("insert") && !toks[i-1].is("merge")
		case "insert", "update", "delete", "merge":
			isTarget = returning
		}
		if !isTarget {
			continue
		}
		j := i + 1
		if j < len(toks) && toks[j].is("strict") {
			j++
		}
		// targets: name(.name)* (, name(.name)*)*
		for j < len(toks) {
			if toks[j].kind != tIdent && toks[j].kind != tQIdent {
				break
			}
			j++
			for j+1 < len(toks) && toks[j].op(".") {
				j += 2
			}
			if j < len(toks) && toks[j].op(",") {
				j++
				continue
			}
			break
		}
		rest := append(append([]token(nil), toks[:i]...), toks[j:]...)
		return sqlText(body, rest)
	}
	return sqlText(body, toks)
}

func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}
