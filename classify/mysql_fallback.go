package classify

// myStatement is the conservative token-level analysis of one MySQL or
// MariaDB statement that TiDB's parser rejected. It never returns Read
// unless the statement is a query or SHOW/DESCRIBE/EXPLAIN whose tokens
// contain nothing with a side effect.
func (a *tokAnalyzer) myStatement(st []token) error {
	b := a.b
	a.toks = st
	kw := leadingKeyword(st)
	at := func(i int) token {
		if i < len(st) {
			return st[i]
		}
		return token{}
	}
	switch kw {
	case "select", "with", "values", "table", "insert", "replace", "update", "delete":
		return a.run(st)
	case "show", "desc", "describe":
		b.catalog = true
		return nil
	case "explain":
		i := 1
		analyze := false
		for at(i).is("analyze") || at(i).is("extended") || at(i).is("partitions") || at(i).is("format") || at(i).op("=") || (at(i-1).op("=") && at(i).kind == tIdent) {
			if at(i).is("analyze") {
				analyze = true
			}
			i++
		}
		if analyze {
			return a.myStatement(st[i:])
		}
		m := b.mark()
		err := a.myStatement(st[i:])
		b.restoreEffects(m)
		return err
	case "set":
		return a.mySet(st)
	case "begin":
		if len(st) == 1 || (len(st) == 2 && at(1).is("work")) {
			b.raise(Buffer)
			return nil
		}
		b.guess("compound statement", true)
		return nil
	case "start":
		if at(1).is("transaction") {
			b.raise(Buffer)
			return nil
		}
	case "commit", "rollback":
		b.guess(ReasonTxnEnd, false)
		return nil
	case "savepoint", "release", "use", "prepare", "deallocate":
		b.raise(Buffer)
		return nil
	case "execute":
		b.guess("EXECUTE of a prepared statement", true)
		return nil
	case "call":
		b.guess("procedure call", true)
		return nil
	case "do":
		return a.run(st[1:])
	case "create":
		i := 1
		if at(i).is("or") && at(i+1).is("replace") {
			i += 2
		}
		if at(i).is("temporary") && at(i+1).is("table") {
			i += 2
			if at(i).is("if") && at(i+1).is("not") && at(i+2).is("exists") {
				i += 3
			}
			if !a.isName(i) {
				break
			}
			n, j := a.name(i)
			b.raise(Buffer)
			if err := a.run(st[j:]); err != nil {
				return err
			}
			b.addTemp(n)
			return nil
		}
		if at(i).is("table") {
			i++
			if at(i).is("if") && at(i+1).is("not") && at(i+2).is("exists") {
				i += 3
			}
			if a.isName(i) {
				n, _ := a.name(i)
				b.addWrite(n)
				b.schemaChange()
				return nil
			}
		}
		b.guess("unrecognized statement", true)
		b.schemaChange() // CREATE TRIGGER, PROCEDURE, ...
		return nil
	case "drop":
		if at(1).is("prepare") {
			b.raise(Buffer)
			return nil
		}
		if at(1).is("temporary") && at(2).is("table") {
			b.raise(Buffer)
			return nil
		}
		if at(1).is("table") {
			i := 2
			if at(i).is("if") && at(i+1).is("exists") {
				i += 2
			}
			for a.isName(i) {
				n, j := a.name(i)
				b.addWrite(n)
				if !b.isTemp(n) {
					b.schemaChange()
				}
				i = j
				if !at(i).op(",") {
					break
				}
				i++
			}
			return nil
		}
		b.guess("unrecognized statement", true)
		b.schemaChange() // DROP TRIGGER, VIEW, PROCEDURE, ...
		return nil
	case "truncate", "alter", "rename", "optimize", "analyze", "repair":
		// MariaDB's ANALYZE [FORMAT=JSON] stmt runs stmt (and shows its
		// plan): it is stmt's class, a write when stmt writes.
		if kw == "analyze" {
			i := 1
			if at(i).is("format") {
				i++
				if at(i).op("=") {
					i++
				}
				i++
			}
			switch {
			case at(i).is("select"), at(i).is("update"), at(i).is("delete"), at(i).is("insert"), at(i).is("replace"), at(i).is("with"), at(i).is("values"):
				a.toks = st
				return a.myStatement(st[i:])
			}
		}
		i := 1
		for at(i).is("table") || at(i).is("tables") || at(i).is("no_write_to_binlog") || at(i).is("local") || at(i).is("ignore") || at(i).is("online") {
			i++
		}
		if a.isName(i) {
			n, _ := a.name(i)
			b.addWrite(n)
			switch kw {
			case "alter", "rename":
				b.schemaChange()
				for k, t := range st {
					switch {
					case t.is("rename"):
						b.unknown = true // the new names are not read here
					case t.is("table") && k > 1 && a.isName(k+1):
						// MariaDB's CONVERT PARTITION p TO TABLE t and CONVERT
						// TABLE t TO PARTITION p: t's rows move.
						n, _ := a.name(k + 1)
						b.addWrite(n)
					}
				}
			}
			return nil
		}
	case "lock", "unlock":
		b.lock()
		return nil
	}
	b.guess("unrecognized statement", true)
	return nil
}

// mySet classifies MySQL SET statements: GLOBAL/PERSIST scopes are Write,
// SET PASSWORD and SET DEFAULT ROLE are Write, SET STATEMENT ... FOR stmt is
// the class of stmt, everything else is Buffer.
func (a *tokAnalyzer) mySet(st []token) error {
	b := a.b
	at := func(i int) token {
		if i < len(st) {
			return st[i]
		}
		return token{}
	}
	switch {
	case at(1).is("password"), at(1).is("default") && at(2).is("role"):
		b.raise(Write)
		return nil
	case at(1).is("statement"):
		depth := 0
		for i := 2; i < len(st); i++ {
			if st[i].op("(") {
				depth++
			} else if st[i].op(")") {
				depth--
			} else if depth == 0 && st[i].is("for") {
				if err := a.run(st[2:i]); err != nil {
					return err
				}
				a.toks = st
				return a.myStatement(st[i+1:])
			}
		}
		b.guess("unrecognized SET STATEMENT", true)
		return nil
	}
	b.raise(Buffer)
	for i := 1; i < len(st); i++ {
		t := st[i]
		if t.is("global") || t.is("persist") || t.is("persist_only") {
			b.raise(Write)
		}
		if t.kind == tSysVar && (t.text == "global" || t.text == "persist" || t.text == "persist_only" ||
			hasPrefix(t.text, "global.") || hasPrefix(t.text, "persist.") || hasPrefix(t.text, "persist_only.")) {
			b.raise(Write)
		}
	}
	return a.run(st[1:])
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }
