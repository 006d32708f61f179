package classify

import "strings"

// tokAnalyzer walks the tokens of one statement (PostgreSQL, or MySQL text
// that TiDB's parser rejected). It tracks parenthesis frames, CTE names,
// FROM/JOIN/USING/UPDATE/INTO targets, function calls and locking clauses.
type tokAnalyzer struct {
	c      *Classifier
	d      Dialect
	b      *builder
	toks   []token
	frames []frame
}

type frame struct {
	sel, upd, del bool // SELECT / UPDATE / DELETE or MERGE seen in this frame
	fromList      bool
	fromWrite     bool // items of the current table list are write targets
	usingDone     bool
	inWith        bool
	aliasAfter    bool   // a FROM item: an alias may follow the closing parenthesis
	cte           string // CTE whose body this frame is
	cteRecursive  bool
	ctes          []string
}

// notFunc lists keywords that may be followed by "(" without being a
// function call.
var notFunc = toSet(`in exists any all some array row values over filter group sets on as
	materialized lateral from join by and or not when then else where having select returning
	set limit offset case is like ilike between to escape using conflict into only of distinct
	union intersect except with recursive table ordinality repeatable partition index key
	primary unique check references foreign exclude include default generated identity
	inherits range list hash modulus remainder window return do update insert delete merge
	overlaps similar collate constraint fulltext spatial against fetch first next rows
	tablesample nulls zone at interval unnest_placeholder within cursor for execute call
	if elseif while loop returns language options server owner storage tablespace`)

// aliasStop lists keywords that end a FROM item (so they are not aliases).
var aliasStop = toSet(`where join inner left right full cross natural on using group order
	having limit offset fetch for union intersect except window returning set values select
	into lock straight_join use force ignore partition tablesample with as do when then outer
	procedure from and or not is`)

func toSet(s string) map[string]struct{} {
	m := make(map[string]struct{})
	for _, w := range strings.Fields(s) {
		m[w] = struct{}{}
	}
	return m
}

func inSet(m map[string]struct{}, t token) bool {
	if t.kind != tIdent {
		return false
	}
	_, ok := m[t.text]
	return ok
}

func (a *tokAnalyzer) tok(i int) token {
	if i >= 0 && i < len(a.toks) {
		return a.toks[i]
	}
	return token{}
}

func (a *tokAnalyzer) top() *frame { return &a.frames[len(a.frames)-1] }

func (a *tokAnalyzer) isName(i int) bool {
	t := a.tok(i)
	return t.kind == tIdent || t.kind == tQIdent
}

// name parses a possibly qualified name at i and returns it normalized with
// the index after it.
func (a *tokAnalyzer) name(i int) (string, int) {
	var parts [4]string
	n := 0
	for a.isName(i) {
		if n < len(parts) {
			parts[n] = a.tok(i).text
			n++
		}
		i++
		if a.tok(i).op(".") && a.isName(i+1) {
			i++
			continue
		}
		break
	}
	return joinName(parts[:n]), i
}

// skipParens skips a balanced parenthesized group starting at i (which must
// be "(") and returns the index after it.
func (a *tokAnalyzer) skipParens(i int) int {
	depth := 0
	for ; i < len(a.toks); i++ {
		t := a.toks[i]
		if t.op("(") {
			depth++
		} else if t.op(")") {
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return i
}

func (a *tokAnalyzer) isCTE(name string) bool {
	if strings.IndexByte(name, '.') >= 0 {
		return false
	}
	for i := len(a.frames) - 1; i >= 0; i-- {
		for _, c := range a.frames[i].ctes {
			if c == name {
				return true
			}
		}
	}
	return false
}

// run analyzes toks as a query or DML statement.
func (a *tokAnalyzer) run(toks []token) error {
	a.toks = toks
	a.frames = append(a.frames[:0], frame{})
	i := 0
	for i < len(a.toks) {
		next, err := a.step(i)
		if err != nil {
			return err
		}
		if next <= i {
			next = i + 1
		}
		i = next
	}
	if len(a.frames) != 1 {
		return errUnbalanced
	}
	return nil
}

func (a *tokAnalyzer) push(f frame) { a.frames = append(a.frames, f) }

func (a *tokAnalyzer) step(i int) (int, error) {
	t := a.toks[i]
	f := a.top()
	switch t.kind {
	case tOp:
		switch t.text {
		case "(", "[":
			a.push(frame{})
			return i + 1, nil
		case ")", "]":
			if len(a.frames) == 1 {
				return 0, errUnbalanced
			}
			closed := *f
			a.frames = a.frames[:len(a.frames)-1]
			p := a.top()
			i++
			if closed.cte != "" {
				if !closed.cteRecursive {
					p.ctes = append(p.ctes, closed.cte)
				}
				if p.inWith && a.tok(i).op(",") {
					return a.cteHeader(i + 1), nil
				}
				p.inWith = false
			}
			if closed.aliasAfter {
				i = a.skipAlias(i)
			}
			return i, nil
		case ",":
			if f.fromList {
				return a.tableRef(i+1, f.fromWrite), nil
			}
		case ":=":
			if a.d == MySQL && a.tok(i-1).kind == tVar {
				a.b.raise(Buffer)
			}
		}
		return i + 1, nil
	case tIdent:
		return a.keyword(i, t, f)
	case tQIdent:
		if a.tok(i + 1).op("(") {
			a.function(t.text, i+1)
			return i + 1, nil
		}
		if a.tok(i + 1).op(".") {
			_, j := a.name(i)
			if a.tok(j).op("(") {
				n, _ := a.name(i)
				a.function(n, j)
			}
			return j, nil
		}
	}
	return i + 1, nil
}

func (a *tokAnalyzer) keyword(i int, t token, f *frame) (int, error) {
	prev := a.tok(i - 1)
	switch t.text {
	case "select":
		f.sel, f.fromList, f.fromWrite = true, false, false
	case "from":
		if prev.is("distinct") && (a.tok(i-2).is("is") || a.tok(i-2).is("not")) {
			return i + 1, nil
		}
		if f.sel || f.upd || f.del {
			f.fromList, f.fromWrite = true, false
			return a.tableRef(i+1, false), nil
		}
	case "join", "straight_join":
		if f.fromList || f.sel || f.upd || f.del {
			f.fromList = true
			return a.tableRef(i+1, f.fromWrite), nil
		}
	case "using":
		if f.del && !f.usingDone && !f.fromList {
			f.usingDone, f.fromList, f.fromWrite = true, true, false
			return a.tableRef(i+1, false), nil
		}
		if f.del && !f.usingDone && a.d == MySQL {
			// MySQL: DELETE FROM t1, t2 USING t1 JOIN t3 ...
			f.usingDone, f.fromWrite = true, false
			return a.tableRef(i+1, false), nil
		}
	case "where", "group", "having", "window", "order", "limit", "offset", "fetch",
		"union", "intersect", "except", "returning", "values", "when", "procedure":
		f.fromList, f.fromWrite = false, false
	case "set":
		f.fromList, f.fromWrite = false, false
	case "with":
		if a.isCTEStart(i + 1) {
			f.inWith = true
			return a.cteHeader(i + 1), nil
		}
	case "table":
		if prev.kind == 0 || prev.op("(") || prev.is("union") || prev.is("intersect") ||
			prev.is("except") || prev.is("all") || prev.is("distinct") {
			if a.isName(i + 1) {
				return a.tableRef(i+1, false), nil
			}
		}
	case "insert", "replace":
		if a.tok(i+1).op("(") && (t.text == "replace" || prev.is("then")) {
			if t.text == "replace" {
				a.function("replace", i+1)
			}
			return i + 1, nil
		}
		if prev.is("then") || prev.is("on") || prev.is("or") {
			return i + 1, nil // MERGE action, trigger event
		}
		return a.insert(i + 1), nil
	case "update":
		switch {
		case prev.is("for"), prev.is("key") && a.tok(i-2).is("no"):
			a.b.lock()
			return i + 1, nil
		case prev.is("do"), prev.is("then"), prev.is("on"), prev.is("or"),
			prev.is("key") && a.tok(i-2).is("duplicate"):
			return i + 1, nil
		}
		return a.update(i+1, f), nil
	case "delete":
		if prev.is("then") || prev.is("on") || prev.is("or") {
			return i + 1, nil
		}
		return a.delete(i+1, f), nil
	case "merge":
		if a.tok(i + 1).is("into") {
			f.del = true
			n, j := a.name(i + 2)
			a.b.addWrite(n)
			return a.skipAlias(j), nil
		}
		a.b.guess("unrecognized MERGE", true)
	case "into":
		if f.sel {
			return a.selectInto(i + 1), nil
		}
	case "for":
		f.fromList, f.fromWrite = false, false
		return a.lockingClause(i + 1), nil
	case "lock":
		if a.d == MySQL && a.tok(i+1).is("in") && a.tok(i+2).is("share") && a.tok(i+3).is("mode") {
			a.b.lock()
			return i + 4, nil
		}
	case "next":
		if a.d == MySQL && a.tok(i+1).is("value") && a.tok(i+2).is("for") {
			a.b.guess("sequence NEXT VALUE FOR", true)
			return i + 3, nil
		}
	case "previous":
		if a.d == MySQL && a.tok(i+1).is("value") && a.tok(i+2).is("for") {
			_, j := a.name(i + 3)
			return j, nil
		}
	case "references":
		if a.isName(i + 1) {
			n, j := a.name(i + 1)
			a.b.addRead(n)
			if a.tok(j).op("(") {
				j = a.skipParens(j)
			}
			return j, nil
		}
	}
	// Generic identifier: possibly qualified; a function call when followed
	// by "(".
	if a.tok(i + 1).op(".") {
		n, j := a.name(i)
		if a.tok(j).op("(") {
			a.function(n, j)
		} else if a.d == MySQL && (strings.HasSuffix(n, ".nextval") || strings.HasSuffix(n, ".setval")) {
			a.b.guess("sequence "+n, true)
		}
		return j, nil
	}
	if a.tok(i+1).op("(") && !inSet(notFunc, t) && !prev.op(".") {
		a.function(t.text, i+1)
	}
	return i + 1, nil
}

// isCTEStart reports whether a WITH keyword at i-1 starts a CTE list.
func (a *tokAnalyzer) isCTEStart(i int) bool {
	if a.tok(i).is("recursive") {
		return true
	}
	if !a.isName(i) {
		return false
	}
	j := i + 1
	if a.tok(j).op("(") {
		j = a.skipParens(j)
	}
	if !a.tok(j).is("as") {
		return false
	}
	j++
	if a.tok(j).is("not") {
		j++
	}
	if a.tok(j).is("materialized") {
		j++
	}
	return a.tok(j).op("(")
}

// cteHeader parses "[RECURSIVE] name [(cols)] AS [NOT] [MATERIALIZED] (" and
// pushes the frame of the CTE body.
func (a *tokAnalyzer) cteHeader(i int) int {
	recursive := false
	if a.tok(i).is("recursive") {
		recursive = true
		i++
	}
	if !a.isName(i) {
		return i
	}
	name := a.tok(i).text
	i++
	if a.tok(i).op("(") {
		i = a.skipParens(i)
	}
	if a.tok(i).is("as") {
		i++
	}
	if a.tok(i).is("not") {
		i++
	}
	if a.tok(i).is("materialized") {
		i++
	}
	if !a.tok(i).op("(") {
		return i
	}
	f := a.top()
	f.inWith = true
	if recursive {
		f.ctes = append(f.ctes, name)
	}
	a.push(frame{cte: name, cteRecursive: recursive})
	return i + 1
}

// tableRef parses one FROM item at i. Write selects whether a table name is
// recorded as written (UPDATE/DELETE targets) or read.
func (a *tokAnalyzer) tableRef(i int, write bool) int {
	for a.tok(i).is("lateral") || a.tok(i).is("only") {
		i++
	}
	t := a.tok(i)
	if t.op("(") {
		nt := a.tok(i + 1)
		if nt.is("select") || nt.is("with") || nt.is("values") || nt.is("table") || nt.op("(") {
			a.push(frame{aliasAfter: true})
			return i + 1
		}
		// Parenthesized join: (a JOIN b ON ...)
		a.push(frame{fromList: true, fromWrite: write, sel: true, aliasAfter: true})
		return a.tableRef(i+1, write)
	}
	if !a.isName(i) || (t.kind == tIdent && inSet(aliasStop, t) && !a.tok(i+1).op(".")) {
		return i
	}
	n, j := a.name(i)
	if a.tok(j).op("(") {
		// Table function: generate_series(...) AS g(x).
		a.function(n, j)
		a.push(frame{aliasAfter: true})
		return j + 1
	}
	switch {
	case a.isCTE(n):
	case a.d == MySQL && n == "dual" && !write:
		// FROM DUAL: no table (DUAL is reserved in MySQL and MariaDB).
	case write:
		a.b.addWrite(n)
	default:
		a.b.addRead(n)
	}
	if a.tok(j).op("*") {
		j++
	}
	return a.skipAlias(j)
}

// skipAlias skips "[AS] alias [(cols)]" at i.
func (a *tokAnalyzer) skipAlias(i int) int {
	hasAS := false
	if a.tok(i).is("with") && a.tok(i+1).is("ordinality") {
		i += 2
	}
	if a.tok(i).is("as") {
		hasAS = true
		i++
	}
	t := a.tok(i)
	if t.kind == tQIdent || (t.kind == tIdent && (hasAS || !inSet(aliasStop, t))) {
		i++
		if a.tok(i).op("(") {
			i = a.skipParens(i)
		}
	}
	return i
}

func (a *tokAnalyzer) insert(i int) int {
	for {
		t := a.tok(i)
		if t.is("ignore") || t.is("low_priority") || t.is("delayed") || t.is("high_priority") || t.is("into") {
			i++
			continue
		}
		break
	}
	if !a.isName(i) {
		a.b.guess("unrecognized INSERT", true)
		return i
	}
	n, j := a.name(i)
	a.b.addWrite(n)
	if a.tok(j).is("as") && a.isName(j+1) {
		j += 2
	}
	if a.tok(j).is("partition") && a.tok(j+1).op("(") {
		j = a.skipParens(j + 1)
	}
	if a.tok(j).op("(") && !a.tok(j+1).is("select") && !a.tok(j+1).is("with") && !a.tok(j+1).is("values") {
		j = a.skipParens(j)
	}
	return j
}

func (a *tokAnalyzer) update(i int, f *frame) int {
	for a.tok(i).is("low_priority") || a.tok(i).is("ignore") {
		i++
	}
	f.upd = true
	if !a.isName(i) && !a.tok(i).is("only") {
		a.b.guess("unrecognized UPDATE", true)
		return i
	}
	if a.d == MySQL {
		// Multi-table UPDATE: every table of the list may be written.
		f.fromList, f.fromWrite = true, true
	}
	return a.tableRef(i, true)
}

func (a *tokAnalyzer) delete(i int, f *frame) int {
	for a.tok(i).is("low_priority") || a.tok(i).is("quick") || a.tok(i).is("ignore") {
		i++
	}
	f.del = true
	if a.d == MySQL && a.tok(i).is("history") && a.tok(i+1).is("from") {
		i++ // MariaDB's DELETE HISTORY FROM t: t's history rows
	}
	if a.tok(i).is("from") {
		if a.d == MySQL {
			f.fromList, f.fromWrite = true, true
		}
		return a.tableRef(i+1, true)
	}
	// MySQL multi-table form: DELETE t1, t2 FROM ... (targets may be aliases).
	if a.d == MySQL && a.isName(i) {
		for a.isName(i) {
			n, j := a.name(i)
			if strings.HasSuffix(n, ".*") {
				n = strings.TrimSuffix(n, ".*")
			}
			a.b.addWrite(n)
			i = j
			if a.tok(i).op(".") && a.tok(i+1).op("*") {
				i += 2
			}
			if !a.tok(i).op(",") {
				break
			}
			i++
		}
		a.b.unknown = true
		return i
	}
	a.b.guess("unrecognized DELETE", true)
	return i
}

// selectInto handles SELECT ... INTO at i (after INTO).
func (a *tokAnalyzer) selectInto(i int) int {
	t := a.tok(i)
	if a.d == MySQL {
		switch {
		case t.kind == tVar:
			a.b.raise(Buffer)
			for a.tok(i).kind == tVar || a.tok(i).op(",") {
				i++
			}
			return i
		case t.is("outfile"), t.is("dumpfile"):
			a.b.raise(Write)
			return i + 1
		}
		a.b.guess("unrecognized SELECT INTO", true)
		return i
	}
	temp := false
	for {
		t = a.tok(i)
		switch {
		case t.is("temp"), t.is("temporary"):
			temp = true
		case t.is("local"), t.is("global"), t.is("unlogged"), t.is("table"):
		default:
			goto name
		}
		i++
	}
name:
	if !a.isName(i) {
		a.b.guess("unrecognized SELECT INTO", true)
		return i
	}
	n, j := a.name(i)
	if temp {
		a.b.raise(Buffer)
		a.b.addTemp(n)
	} else {
		a.b.addWrite(n)
		a.b.schemaChange()
	}
	return j
}

// lockingClause handles FOR UPDATE / NO KEY UPDATE / SHARE / KEY SHARE [OF
// ...] [NOWAIT | SKIP LOCKED] at i (after FOR).
func (a *tokAnalyzer) lockingClause(i int) int {
	switch {
	case a.tok(i).is("update"), a.tok(i).is("share"):
		i++
	case a.tok(i).is("no") && a.tok(i+1).is("key") && a.tok(i+2).is("update"):
		i += 3
	case a.tok(i).is("key") && a.tok(i+1).is("share"):
		i += 2
	default:
		return i
	}
	a.b.lock()
	if a.tok(i).is("of") {
		i++
		for a.isName(i) {
			_, i = a.name(i)
			if !a.tok(i).op(",") {
				break
			}
			i++
		}
	}
	return i
}

// function classifies a call of name (lower case unless quoted) whose
// argument list starts at the "(" at index open.
func (a *tokAnalyzer) function(name string, open int) {
	if isCatalogFunc(a.d, name) {
		a.b.catalog = true
	}
	switch lookupFunc(a.d, name) {
	case fnRead:
		return
	case fnBuffer:
		if a.d == MySQL && name == "last_insert_id" && a.tok(open+1).op(")") {
			return // LAST_INSERT_ID() reads; LAST_INSERT_ID(expr) sets it
		}
		a.b.raise(Buffer)
		return
	case fnLock:
		a.b.lock()
		return
	case fnWrite:
		base := name
		if k := strings.LastIndexByte(base, '.'); k >= 0 {
			base = base[k+1:]
		}
		if (base == "nextval" || base == "setval") && a.d == Postgres {
			if s := a.tok(open + 1); s.kind == tString && (a.tok(open+2).op(")") || a.tok(open+2).op(",") || a.tok(open+2).op("::")) {
				if seq := seqName(s.text); seq != "" {
					a.b.addWrite(seq)
					return
				}
			}
		}
		a.b.guess("function "+name+" has side effects", true)
		return
	}
	if a.c.isReadOnlyUserFunc(name) {
		a.b.userFns = true
		return
	}
	a.b.guess("unknown function "+name, true)
}

// seqName extracts a sequence name from a regclass string literal such as
// 'users_id_seq', 'public.s' or '"MySeq"'.
func seqName(lit string) string {
	if len(lit) < 2 || lit[0] != '\'' {
		return ""
	}
	body := strings.ReplaceAll(lit[1:len(lit)-1], "''", "'")
	var parts []string
	for _, p := range strings.Split(body, ".") {
		p = strings.TrimSpace(p)
		if len(p) >= 2 && p[0] == '"' && p[len(p)-1] == '"' {
			p = strings.ReplaceAll(p[1:len(p)-1], `""`, `"`)
		} else {
			p = lowerASCII(p)
		}
		if p == "" {
			return ""
		}
		parts = append(parts, p)
	}
	return joinName(parts)
}
