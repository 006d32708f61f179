package classify

import (
	"strings"
	"sync"

	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"
	_ "github.com/pingcap/tidb/pkg/parser/test_driver" // value expressions for the parser
)

// TiDB's parser is not safe for concurrent use; keep a pool.
var tidbParsers = sync.Pool{New: func() any {
	p := parser.New()
	p.SetMariaDB(true)
	p.EnableWindowFunc(true)
	return p
}}

// classifyMySQL lexes sql with the MySQL lexer (which validates quoting and
// comments and splits statements), parses each statement with TiDB's parser
// and walks its AST. Statements TiDB rejects (MariaDB syntax, incomplete
// SQL) fall back to the token-level analyzer.
func (c *Classifier) classifyMySQL(sql string) Result {
	var buf [64]token
	toks, err := lexMySQL(sql, buf[:0])
	if err != nil {
		return unparseable()
	}
	b := &builder{}
	ta := &tokAnalyzer{c: c, d: MySQL, b: b}
	// MariaDB executable comments /*M! ... */ are invisible to TiDB.
	tokenOnly := strings.Contains(sql, "/*M!") || strings.Contains(sql, "/*m!")
	p := tidbParsers.Get().(*parser.Parser)
	defer tidbParsers.Put(p)

	start := 0 // byte offset where the current statement text starts
	stmtStart := 0
	for i := 0; i <= len(toks); i++ {
		if i < len(toks) && !toks[i].op(";") {
			continue
		}
		end := len(sql)
		if i < len(toks) {
			end = toks[i].pos
		}
		st := toks[stmtStart:i]
		text := sql[start:end]
		stmtStart, start = i+1, end+1
		if len(st) == 0 {
			continue
		}
		if !tokenOnly {
			nodes, _, perr := p.Parse(text, "", "")
			if perr == nil && len(nodes) > 0 {
				for _, n := range nodes {
					c.mysqlNode(b, n)
				}
				continue
			}
		}
		if err := ta.myStatement(st); err != nil {
			return unparseable()
		}
	}
	return b.result()
}

// myWalker collects tables, functions, variables and locking from an AST.
type myWalker struct {
	c        *Classifier
	b        *builder
	skip     map[*ast.TableName]bool // names already recorded as targets
	ctes     []string
	cteMarks []int
	noReads  bool
}

func myTableName(t *ast.TableName) string {
	if t.Schema.L != "" {
		return t.Schema.L + "." + t.Name.L
	}
	return t.Name.L
}

func (w *myWalker) isCTE(t *ast.TableName) bool {
	if t.Schema.L != "" {
		return false
	}
	for _, c := range w.ctes {
		if c == t.Name.L {
			return true
		}
	}
	return false
}

func (w *myWalker) pushWith(with *ast.WithClause) {
	w.cteMarks = append(w.cteMarks, len(w.ctes))
}

func (w *myWalker) popWith() {
	if n := len(w.cteMarks); n > 0 {
		w.ctes = w.ctes[:w.cteMarks[n-1]]
		w.cteMarks = w.cteMarks[:n-1]
	}
}

func (w *myWalker) Enter(n ast.Node) (ast.Node, bool) {
	switch n := n.(type) {
	case *ast.SelectStmt:
		if n.With != nil {
			w.pushWith(n.With)
		}
		if n.LockInfo != nil && n.LockInfo.LockType != ast.SelectLockNone {
			w.b.lock()
		}
		if n.SelectIntoOpt != nil {
			switch n.SelectIntoOpt.Tp {
			case ast.SelectIntoVars:
				w.b.raise(Buffer)
			default:
				w.b.raise(Write) // OUTFILE / DUMPFILE write a server file
			}
		}
	case *ast.SetOprStmt:
		if n.With != nil {
			w.pushWith(n.With)
		}
	case *ast.UpdateStmt:
		if n.With != nil {
			w.pushWith(n.With)
		}
	case *ast.DeleteStmt:
		if n.With != nil {
			w.pushWith(n.With)
		}
	case *ast.CommonTableExpression:
		if n.IsRecursive {
			w.ctes = append(w.ctes, n.Name.L)
		}
	case *ast.TableName:
		if w.skip[n] || w.isCTE(n) || w.noReads {
			return n, true
		}
		w.b.addRead(myTableName(n))
		return n, true
	case *ast.FuncCallExpr:
		name := n.FnName.L
		if n.Schema.L != "" {
			name = n.Schema.L + "." + name
		}
		w.function(name, len(n.Args))
	case *ast.VariableExpr:
		if n.Value != nil {
			w.b.raise(Buffer)
		}
	case *ast.ColumnName:
		if n.Name.L == "nextval" && n.Table.L != "" {
			w.b.guess("sequence "+n.Table.L+".nextval", true)
		}
	}
	return n, false
}

func (w *myWalker) Leave(n ast.Node) (ast.Node, bool) {
	switch n := n.(type) {
	case *ast.SelectStmt:
		if n.With != nil {
			w.popWith()
		}
	case *ast.SetOprStmt:
		if n.With != nil {
			w.popWith()
		}
	case *ast.UpdateStmt:
		if n.With != nil {
			w.popWith()
		}
	case *ast.DeleteStmt:
		if n.With != nil {
			w.popWith()
		}
	case *ast.CommonTableExpression:
		if !n.IsRecursive {
			w.ctes = append(w.ctes, n.Name.L)
		}
	}
	return n, true
}

func (w *myWalker) function(name string, nargs int) {
	switch name {
	case "setvar":
		w.b.raise(Buffer)
		return
	case "getvar":
		return
	}
	switch lookupFunc(MySQL, name) {
	case fnRead:
		return
	case fnBuffer:
		if name == "last_insert_id" && nargs == 0 {
			return
		}
		w.b.raise(Buffer)
		return
	case fnLock:
		w.b.lock()
		return
	case fnWrite:
		w.b.guess("function "+name+" has side effects", true)
		return
	}
	if w.c.isReadOnlyUserFunc(name) {
		w.b.userFns = true
		return
	}
	w.b.guess("unknown function "+name, true)
}

func (w *myWalker) walk(n ast.Node) {
	if n != nil {
		n.Accept(w)
	}
}

// target records t as written and keeps the walk from recording it as read.
func (w *myWalker) target(t *ast.TableName) {
	if t == nil {
		return
	}
	if w.skip == nil {
		w.skip = make(map[*ast.TableName]bool)
	}
	w.skip[t] = true
	w.b.addWrite(myTableName(t))
}

// tableSources maps aliases and names to the tables of a FROM clause.
func tableSources(n ast.Node) (names map[string]*ast.TableName, all []*ast.TableName) {
	names = make(map[string]*ast.TableName)
	var visit func(r ast.ResultSetNode)
	visit = func(r ast.ResultSetNode) {
		switch r := r.(type) {
		case *ast.Join:
			if r.Left != nil {
				visit(r.Left)
			}
			if r.Right != nil {
				visit(r.Right)
			}
		case *ast.TableSource:
			if t, ok := r.Source.(*ast.TableName); ok {
				all = append(all, t)
				names[t.Name.L] = t
				if t.Schema.L != "" {
					names[t.Schema.L+"."+t.Name.L] = t
				}
				if r.AsName.L != "" {
					names[r.AsName.L] = t
				}
			}
		case *ast.TableName:
			all = append(all, r)
			names[r.Name.L] = r
		}
	}
	switch n := n.(type) {
	case *ast.TableRefsClause:
		if n != nil && n.TableRefs != nil {
			visit(n.TableRefs)
		}
	case *ast.Join:
		visit(n)
	}
	return names, all
}

func (c *Classifier) mysqlNode(b *builder, n ast.StmtNode) {
	w := &myWalker{c: c, b: b}
	switch n := n.(type) {
	case *ast.SelectStmt, *ast.SetOprStmt, *ast.DoStmt:
		w.walk(n)
	case *ast.InsertStmt:
		if n.Table != nil {
			_, all := tableSources(n.Table)
			for _, t := range all {
				w.target(t)
			}
			if len(all) == 0 {
				b.guess("unrecognized INSERT target", true)
			}
		}
		w.walk(n)
	case *ast.UpdateStmt:
		names, all := tableSources(n.TableRefs)
		if !n.MultipleTable && len(all) == 1 {
			w.target(all[0])
		} else {
			for _, as := range n.List {
				if as.Column == nil || as.Column.Table.L == "" {
					for _, t := range all {
						b.addWrite(myTableName(t))
					}
					continue
				}
				key := as.Column.Table.L
				if as.Column.Schema.L != "" {
					key = as.Column.Schema.L + "." + key
				}
				if t, ok := names[key]; ok {
					b.addWrite(myTableName(t))
				} else {
					b.guess("UPDATE of an unresolved table "+key, true)
				}
			}
			if len(all) == 0 {
				b.guess("UPDATE of a derived table", true)
			}
		}
		w.walk(n)
	case *ast.DeleteStmt:
		names, all := tableSources(n.TableRefs)
		if n.IsMultiTable && n.Tables != nil {
			for _, t := range n.Tables.Tables {
				w.skip = mapAdd(w.skip, t)
				key := t.Name.L
				if t.Schema.L != "" {
					key = t.Schema.L + "." + key
				}
				switch real, ok := names[key]; {
				case ok:
					b.addWrite(myTableName(real))
				case key == "history":
					// MariaDB's DELETE HISTORY FROM t, which TiDB reads as
					// DELETE history FROM t: t's history rows.
					for _, t := range all {
						b.addWrite(myTableName(t))
					}
				default:
					b.addWrite(myTableName(t))
				}
			}
		} else if len(all) == 1 {
			w.target(all[0])
		} else {
			b.guess("unrecognized DELETE target", true)
		}
		w.walk(n)
	case *ast.CreateTableStmt:
		w.skip = mapAdd(w.skip, n.Table)
		w.walk(n)
		switch n.TemporaryKeyword {
		case ast.TemporaryLocal:
			b.raise(Buffer)
			b.addTemp(myTableName(n.Table))
		default:
			b.addWrite(myTableName(n.Table))
			b.schemaChange()
		}
	case *ast.DropTableStmt:
		if !n.IsView && n.TemporaryKeyword == ast.TemporaryLocal {
			b.raise(Buffer)
			return
		}
		for _, t := range n.Tables {
			name := myTableName(t)
			b.addWrite(name)
			if !b.isTemp(name) {
				b.schemaChange()
			}
		}
	case *ast.TruncateTableStmt:
		b.addWrite(myTableName(n.Table))
	case *ast.AlterTableStmt:
		b.addWrite(myTableName(n.Table))
		for _, spec := range n.Specs {
			// RENAME TO names the new table; EXCHANGE PARTITION ... WITH
			// TABLE the table whose rows change places with the partition's.
			if (spec.Tp == ast.AlterTableRenameTable || spec.Tp == ast.AlterTableExchangePartition) && spec.NewTable != nil {
				b.addWrite(myTableName(spec.NewTable))
			}
		}
		b.schemaChange()
	case *ast.CreateIndexStmt:
		b.addWrite(myTableName(n.Table))
		b.schemaChange()
	case *ast.DropIndexStmt:
		b.addWrite(myTableName(n.Table))
		b.schemaChange()
	case *ast.RenameTableStmt:
		for _, t := range n.TableToTables {
			b.addWrite(myTableName(t.OldTable))
			b.addWrite(myTableName(t.NewTable))
		}
		b.schemaChange()
	case *ast.CreateViewStmt:
		w.skip = mapAdd(w.skip, n.ViewName)
		w.walk(n)
		b.addWrite(myTableName(n.ViewName))
		b.schemaChange()
	case *ast.OptimizeTableStmt:
		for _, t := range n.Tables {
			b.addWrite(myTableName(t))
		}
	case *ast.AnalyzeTableStmt:
		for _, t := range n.TableNames {
			b.addWrite(myTableName(t))
		}
	case *ast.LoadDataStmt:
		if n.Table != nil {
			b.addWrite(myTableName(n.Table))
		} else {
			b.guess("LOAD DATA", true)
		}
	case *ast.LockTablesStmt:
		b.lock()
		for _, tl := range n.TableLocks {
			b.addRead(myTableName(tl.Table))
		}
	case *ast.UnlockTablesStmt:
		b.lock()
	case *ast.ShowStmt:
		w.noReads = false
		w.walk(n)
		b.catalog = true
	case *ast.ExplainStmt:
		if n.Analyze {
			c.mysqlNode(b, n.Stmt)
			return
		}
		m := b.mark()
		c.mysqlNode(b, n.Stmt)
		b.restoreEffects(m)
	case *ast.ExplainForStmt:
	case *ast.SetStmt:
		b.raise(Buffer)
		for _, v := range n.Variables {
			name := strings.ToLower(v.Name)
			if v.IsGlobal || v.IsInstance || strings.HasPrefix(name, "persist") {
				b.raise(Write) // server-wide, not session-only
			}
		}
		w.walk(n)
	case *ast.SetRoleStmt:
		b.raise(Buffer)
	case *ast.BeginStmt, *ast.SavepointStmt, *ast.ReleaseSavepointStmt, *ast.UseStmt,
		*ast.PrepareStmt, *ast.DeallocateStmt:
		b.raise(Buffer)
	case *ast.CommitStmt, *ast.RollbackStmt:
		b.guess(ReasonTxnEnd, false)
	case *ast.ExecuteStmt:
		b.guess("EXECUTE of a prepared statement", true)
	case *ast.CallStmt:
		b.guess("procedure call", true)
	default:
		b.guess("statement "+strings.TrimPrefix(typeName(n), "*ast."), true)
		if _, ddl := n.(ast.DDLNode); ddl {
			b.schemaChange() // databases, sequences, ...
		} else if _, dcl := n.(*ast.GrantStmt); dcl {
			b.schemaChange()
		} else if _, dcl := n.(*ast.RevokeStmt); dcl {
			b.schemaChange()
		}
	}
}

func mapAdd(m map[*ast.TableName]bool, t *ast.TableName) map[*ast.TableName]bool {
	if m == nil {
		m = make(map[*ast.TableName]bool)
	}
	if t != nil {
		m[t] = true
	}
	return m
}
