package classify

import "strings"

// classifyPostgres lexes sql and classifies each statement.
func (c *Classifier) classifyPostgres(sql string) Result {
	var buf [64]token
	toks, err := lexPostgres(sql, buf[:0])
	if err != nil {
		return unparseable()
	}
	b := &builder{}
	a := &tokAnalyzer{c: c, d: Postgres, b: b}
	for _, st := range splitStatements(toks) {
		if err := a.pgStatement(st); err != nil {
			return unparseable()
		}
	}
	if hasRegType(toks) {
		b.catalog = true
	}
	return b.result()
}

// leadingKeyword returns the first keyword of a statement, looking through
// leading parentheses.
func leadingKeyword(st []token) string {
	for _, t := range st {
		if t.op("(") {
			continue
		}
		if t.kind == tIdent {
			return t.text
		}
		return ""
	}
	return ""
}

func (a *tokAnalyzer) pgStatement(st []token) error {
	b := a.b
	kw := leadingKeyword(st)
	at := func(i int) token {
		if i < len(st) {
			return st[i]
		}
		return token{}
	}
	switch kw {
	case "select", "with", "values", "table", "insert", "update", "delete", "merge":
		return a.run(st)
	case "explain":
		return a.pgExplain(st[1:])
	case "show":
		return nil
	case "set":
		// SET [SESSION | LOCAL] ..., SET TRANSACTION, SET SESSION
		// CHARACTERISTICS, SET ROLE, SET SESSION AUTHORIZATION, SET
		// CONSTRAINTS: all session or transaction scoped.
		b.raise(Buffer)
		return a.run(st[1:])
	case "reset", "discard", "listen", "unlisten", "deallocate", "fetch", "move", "close",
		"savepoint", "release":
		b.raise(Buffer)
		return nil
	case "begin":
		b.raise(Buffer)
		return nil
	case "start":
		if at(1).is("transaction") {
			b.raise(Buffer)
			return nil
		}
	case "commit", "end", "abort", "rollback":
		if at(1).is("prepared") {
			b.guess("two-phase commit", false)
			return nil
		}
		b.guess(ReasonTxnEnd, false)
		return nil
	case "prepare":
		if at(1).is("transaction") {
			b.guess("two-phase commit", false)
			return nil
		}
		b.raise(Buffer)
		return nil
	case "execute":
		b.guess("EXECUTE of a prepared statement", true)
		return nil
	case "declare":
		// DECLARE name [options] CURSOR [WITH[OUT] HOLD] FOR query
		for i := 1; i < len(st); i++ {
			if st[i].is("for") {
				b.raise(Buffer)
				return a.run(st[i+1:])
			}
		}
	case "copy":
		return a.pgCopy(st)
	case "lock":
		b.lock()
		i := 1
		if at(i).is("table") {
			i++
		}
		for {
			if at(i).is("only") {
				i++
			}
			if !(at(i).kind == tIdent || at(i).kind == tQIdent) {
				break
			}
			a.toks = st
			n, j := a.name(i)
			b.addRead(n)
			i = j
			if at(i).op("*") {
				i++
			}
			if !at(i).op(",") {
				break
			}
			i++
		}
		return nil
	case "notify":
		b.raise(Write)
		return nil
	case "call":
		b.guess("procedure call", true)
		return nil
	case "do":
		b.guess("anonymous code block (DO)", true)
		return nil
	case "create":
		return a.pgCreate(st)
	case "drop":
		return a.pgDrop(st)
	case "alter", "truncate", "vacuum", "analyze", "analyse", "cluster", "reindex", "refresh":
		return a.ddlTargets(st)
	case "grant", "revoke", "comment", "security", "import", "reassign":
		b.guess(kw+" statement", true)
		b.schemaChange()
		return nil
	case "checkpoint", "load":
		b.guess(kw+" statement", true)
		return nil
	}
	b.guess("unrecognized statement", true)
	return nil
}

// pgExplain handles EXPLAIN [ANALYZE] [VERBOSE] stmt and EXPLAIN (options)
// stmt. Only ANALYZE executes the statement; otherwise the statement is
// planned and its tables are reported as read.
func (a *tokAnalyzer) pgExplain(st []token) error {
	analyze := false
	i := 0
	if len(st) > 0 && st[0].op("(") {
		depth := 0
		for ; i < len(st); i++ {
			t := st[i]
			if t.op("(") {
				depth++
			} else if t.op(")") {
				depth--
				if depth == 0 {
					i++
					break
				}
			} else if t.is("analyze") || t.is("analyse") {
				analyze = true
				if i+1 < len(st) && (st[i+1].is("false") || st[i+1].is("off") || (st[i+1].kind == tNumber && st[i+1].text == "0")) {
					analyze = false
				}
			}
		}
	} else {
		for i < len(st) && (st[i].is("analyze") || st[i].is("analyse") || st[i].is("verbose")) {
			if !st[i].is("verbose") {
				analyze = true
			}
			i++
		}
	}
	inner := st[i:]
	if analyze {
		return a.pgStatement(inner)
	}
	switch leadingKeyword(inner) {
	case "select", "with", "values", "table", "insert", "update", "delete", "merge",
		"execute", "declare", "create":
	default:
		a.b.guess("unrecognized EXPLAIN", true)
		return nil
	}
	m := a.b.mark()
	err := a.pgStatement(inner)
	a.b.restoreEffects(m)
	return err
}

// pgCopy handles COPY table|(query) TO|FROM target.
func (a *tokAnalyzer) pgCopy(st []token) error {
	b := a.b
	a.toks = st
	i := 1
	var table string
	var query []token
	if a.tok(i).op("(") {
		j := a.skipParens(i)
		query = st[i+1 : j-1]
		i = j
	} else if a.isName(i) {
		table, i = a.name(i)
		if a.tok(i).op("(") {
			i = a.skipParens(i)
		}
	} else {
		b.guess("unrecognized COPY", true)
		return nil
	}
	dir := a.tok(i)
	switch {
	case dir.is("from"):
		if table == "" {
			b.guess("unrecognized COPY", true)
			return nil
		}
		b.addWrite(table)
		return nil
	case dir.is("to"):
		if !a.tok(i + 1).is("stdout") {
			b.raise(Write) // server-side file or program
		}
		if table != "" {
			b.addRead(table)
			return nil
		}
		return a.run(query)
	}
	b.guess("unrecognized COPY", true)
	return nil
}

// pgCreate handles CREATE statements: temporary tables, views and sequences
// are Buffer; other objects are Write.
func (a *tokAnalyzer) pgCreate(st []token) error {
	b := a.b
	a.toks = st
	i := 1
	if a.tok(i).is("or") && a.tok(i+1).is("replace") {
		i += 2
	}
	temp := false
	for {
		t := a.tok(i)
		if t.is("temp") || t.is("temporary") {
			temp = true
		} else if !(t.is("global") || t.is("local") || t.is("unlogged") || t.is("recursive") || t.is("materialized") || t.is("unique") || t.is("concurrently")) {
			break
		}
		i++
	}
	obj := a.tok(i)
	i++
	if a.tok(i).is("if") && a.tok(i+1).is("not") && a.tok(i+2).is("exists") {
		i += 3
	}
	switch {
	case obj.is("table"), obj.is("view"), obj.is("sequence"):
		if !a.isName(i) {
			b.guess("unrecognized CREATE", true)
			return nil
		}
		n, j := a.name(i)
		if temp {
			b.raise(Buffer)
		}
		// Analyze the rest (column defaults, AS query) from after the name.
		if err := a.run(st[j:]); err != nil {
			return err
		}
		if temp {
			b.addTemp(n)
		} else {
			b.addWrite(n)
			b.schemaChange()
		}
		return nil
	case obj.is("index"):
		for ; i < len(st); i++ {
			if st[i].is("on") {
				i++
				if a.tok(i).is("only") {
					i++
				}
				n, _ := a.name(i)
				b.addWrite(n)
				if !b.isTemp(n) {
					b.schemaChange()
				}
				return nil
			}
		}
	}
	b.guess("CREATE "+obj.text, true)
	b.schemaChange()
	return nil
}

// pgDrop handles DROP statements; dropping only temporary tables created
// earlier in the same text is Buffer.
func (a *tokAnalyzer) pgDrop(st []token) error {
	b := a.b
	a.toks = st
	i := 2
	if !a.tok(1).is("table") && !a.tok(1).is("view") && !a.tok(1).is("sequence") {
		b.guess("DROP "+a.tok(1).text, true)
		b.schemaChange()
		return nil
	}
	if a.tok(i).is("if") && a.tok(i+1).is("exists") {
		i += 2
	}
	for a.isName(i) {
		n, j := a.name(i)
		b.addWrite(n)
		if !b.isTemp(n) {
			b.schemaChange()
		}
		i = j
		if !a.tok(i).op(",") {
			break
		}
		i++
	}
	if a.tok(i).is("cascade") && b.ddl {
		// Dependent views, constraints and defaults go too: not named here.
		b.guess("DROP ... CASCADE", true)
	}
	return nil
}

// ddlTargets handles ALTER/TRUNCATE/VACUUM/ANALYZE/CLUSTER/REINDEX/REFRESH:
// Write, with the table names when they can be found.
func (a *tokAnalyzer) ddlTargets(st []token) error {
	b := a.b
	a.toks = st
	kw := st[0].text
	i := 1
	switch kw {
	case "alter":
		if !a.tok(1).is("table") {
			b.guess("ALTER "+a.tok(1).text, true)
			b.schemaChange()
			return nil
		}
		i = 2
		if a.tok(i).is("if") && a.tok(i+1).is("exists") {
			i += 2
		}
		if a.tok(i).is("only") {
			i++
		}
		n, j := a.name(i)
		b.addWrite(n)
		if !b.isTemp(n) {
			b.schemaChange()
		}
		// ALTER TABLE old RENAME TO new: the new name is written too.
		if a.tok(j).is("rename") && a.tok(j+1).is("to") && a.isName(j+2) {
			nn, _ := a.name(j + 2)
			if i := strings.LastIndexByte(n, '.'); i >= 0 && strings.IndexByte(nn, '.') < 0 {
				nn = n[:i+1] + nn // the new name stays in the old schema
			}
			b.addWrite(nn)
		}
		// [NO] INHERIT parent: what a read of the parent returns changes;
		// ATTACH and DETACH PARTITION p: the partition is named too.
		for k := j; k < len(st); k++ {
			if (st[k].is("inherit") || st[k].is("partition") && (a.tok(k-1).is("attach") || a.tok(k-1).is("detach"))) && a.isName(k+1) {
				pn, _ := a.name(k + 1)
				b.addWrite(pn)
			}
		}
		return nil
	case "refresh":
		for i < len(st) && (st[i].is("materialized") || st[i].is("view") || st[i].is("concurrently")) {
			i++
		}
	case "truncate":
		if a.tok(i).is("table") {
			i++
		}
	case "vacuum", "analyze", "analyse":
		if a.tok(i).op("(") {
			i = a.skipParens(i)
		}
		for a.tok(i).is("full") || a.tok(i).is("freeze") || a.tok(i).is("verbose") || a.tok(i).is("analyze") || a.tok(i).is("analyse") {
			i++
		}
	default:
		b.guess(kw+" statement", true)
		return nil
	}
	found := false
	for {
		if a.tok(i).is("only") {
			i++
		}
		if !a.isName(i) {
			break
		}
		n, j := a.name(i)
		b.addWrite(n)
		found = true
		i = j
		if a.tok(i).op("*") {
			i++
		}
		if a.tok(i).op("(") {
			i = a.skipParens(i)
		}
		if !a.tok(i).op(",") {
			break
		}
		i++
	}
	if !found {
		b.guess(kw+" of every table", true)
	}
	// TRUNCATE ... CASCADE empties every table whose foreign key references
	// a named one, transitively, whatever its ON DELETE action: not named.
	if kw == "truncate" {
		for k := i; k < len(st); k++ {
			if st[k].is("cascade") {
				b.guess("TRUNCATE ... CASCADE", true)
			}
		}
	}
	return nil
}
