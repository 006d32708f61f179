package mysqlclassify

import (
	"fmt"
	"strings"
	"sync"

	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"
	_ "github.com/pingcap/tidb/pkg/parser/test_driver" // value expressions for the parser

	"github.com/freshread/freshread/internal/engines"
)

func init() { engines.MySQLStatement = statement }

// TiDB's parser is not safe for concurrent use; keep a pool.
var tidbParsers = sync.Pool{New: func() any {
	p := parser.New()
	p.SetMariaDB(true)
	p.EnableWindowFunc(true)
	return p
}}

// statement parses text, one statement, with TiDB's parser and walks its
// AST into s; false when TiDB rejects it (MariaDB syntax, incomplete SQL).
func statement(text string, s engines.MySQLSink) bool {
	p := tidbParsers.Get().(*parser.Parser)
	defer tidbParsers.Put(p)
	nodes, _, err := p.Parse(text, "", "")
	if err != nil || len(nodes) == 0 {
		return false
	}
	for _, n := range nodes {
		node(s, n)
	}
	return true
}

// myWalker collects tables, functions, variables and locking from an AST.
type myWalker struct {
	b        engines.MySQLSink
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
			w.b.Lock()
		}
		if n.SelectIntoOpt != nil {
			switch n.SelectIntoOpt.Tp {
			case ast.SelectIntoVars:
				w.b.Buffer()
			default:
				w.b.Write() // OUTFILE / DUMPFILE write a server file
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
		w.b.AddRead(myTableName(n))
		return n, true
	case *ast.FuncCallExpr:
		name := n.FnName.L
		if n.Schema.L != "" {
			name = n.Schema.L + "." + name
		}
		w.b.Function(name, len(n.Args))
	case *ast.VariableExpr:
		if n.Value != nil {
			w.b.Buffer()
		}
	case *ast.ColumnName:
		if n.Name.L == "nextval" && n.Table.L != "" {
			w.b.Guess("sequence "+n.Table.L+".nextval", true)
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
	w.b.AddWrite(myTableName(t))
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

func node(b engines.MySQLSink, n ast.StmtNode) {
	w := &myWalker{b: b}
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
				b.Guess("unrecognized INSERT target", true)
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
						b.AddWrite(myTableName(t))
					}
					continue
				}
				key := as.Column.Table.L
				if as.Column.Schema.L != "" {
					key = as.Column.Schema.L + "." + key
				}
				if t, ok := names[key]; ok {
					b.AddWrite(myTableName(t))
				} else {
					b.Guess("UPDATE of an unresolved table "+key, true)
				}
			}
			if len(all) == 0 {
				b.Guess("UPDATE of a derived table", true)
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
					b.AddWrite(myTableName(real))
				case key == "history":
					// MariaDB's DELETE HISTORY FROM t, which TiDB reads as
					// DELETE history FROM t: t's history rows.
					for _, t := range all {
						b.AddWrite(myTableName(t))
					}
				default:
					b.AddWrite(myTableName(t))
				}
			}
		} else if len(all) == 1 {
			w.target(all[0])
		} else {
			b.Guess("unrecognized DELETE target", true)
		}
		w.walk(n)
	case *ast.CreateTableStmt:
		w.skip = mapAdd(w.skip, n.Table)
		w.walk(n)
		switch n.TemporaryKeyword {
		case ast.TemporaryLocal:
			b.Buffer()
			b.AddTemp(myTableName(n.Table))
		default:
			b.AddWrite(myTableName(n.Table))
			b.SchemaChange()
		}
	case *ast.DropTableStmt:
		if !n.IsView && n.TemporaryKeyword == ast.TemporaryLocal {
			b.Buffer()
			return
		}
		for _, t := range n.Tables {
			name := myTableName(t)
			b.AddWrite(name)
			if !b.IsTemp(name) {
				b.SchemaChange()
			}
		}
	case *ast.TruncateTableStmt:
		b.AddWrite(myTableName(n.Table))
	case *ast.AlterTableStmt:
		b.AddWrite(myTableName(n.Table))
		for _, spec := range n.Specs {
			// RENAME TO names the new table; EXCHANGE PARTITION ... WITH
			// TABLE the table whose rows change places with the partition's.
			if (spec.Tp == ast.AlterTableRenameTable || spec.Tp == ast.AlterTableExchangePartition) && spec.NewTable != nil {
				b.AddWrite(myTableName(spec.NewTable))
			}
		}
		b.SchemaChange()
	case *ast.CreateIndexStmt:
		b.AddWrite(myTableName(n.Table))
		b.SchemaChange()
	case *ast.DropIndexStmt:
		b.AddWrite(myTableName(n.Table))
		b.SchemaChange()
	case *ast.RenameTableStmt:
		for _, t := range n.TableToTables {
			b.AddWrite(myTableName(t.OldTable))
			b.AddWrite(myTableName(t.NewTable))
		}
		b.SchemaChange()
	case *ast.CreateViewStmt:
		w.skip = mapAdd(w.skip, n.ViewName)
		w.walk(n)
		b.AddWrite(myTableName(n.ViewName))
		b.SchemaChange()
	case *ast.OptimizeTableStmt:
		for _, t := range n.Tables {
			b.AddWrite(myTableName(t))
		}
	case *ast.AnalyzeTableStmt:
		for _, t := range n.TableNames {
			b.AddWrite(myTableName(t))
		}
	case *ast.LoadDataStmt:
		if n.Table != nil {
			b.AddWrite(myTableName(n.Table))
		} else {
			b.Guess("LOAD DATA", true)
		}
	case *ast.LockTablesStmt:
		b.Lock()
		for _, tl := range n.TableLocks {
			b.AddRead(myTableName(tl.Table))
		}
	case *ast.UnlockTablesStmt:
		b.Lock()
	case *ast.ShowStmt:
		w.noReads = false
		w.walk(n)
		b.Catalog()
	case *ast.ExplainStmt:
		if n.Analyze {
			node(b, n.Stmt)
			return
		}
		b.Explain(func() { node(b, n.Stmt) })
	case *ast.ExplainForStmt:
	case *ast.SetStmt:
		b.Buffer()
		for _, v := range n.Variables {
			name := strings.ToLower(v.Name)
			if v.IsGlobal || v.IsInstance || strings.HasPrefix(name, "persist") {
				b.Write() // server-wide, not session-only
			}
		}
		w.walk(n)
	case *ast.SetRoleStmt:
		b.Buffer()
	case *ast.BeginStmt, *ast.SavepointStmt, *ast.ReleaseSavepointStmt, *ast.UseStmt,
		*ast.PrepareStmt, *ast.DeallocateStmt:
		b.Buffer()
	case *ast.CommitStmt, *ast.RollbackStmt:
		b.TxnEnd()
	case *ast.ExecuteStmt:
		b.Guess("EXECUTE of a prepared statement", true)
	case *ast.CallStmt:
		b.Guess("procedure call", true)
	default:
		b.Guess("statement "+strings.TrimPrefix(fmt.Sprintf("%T", n), "*ast."), true)
		if _, ddl := n.(ast.DDLNode); ddl {
			b.SchemaChange() // databases, sequences, ...
		} else if _, dcl := n.(*ast.GrantStmt); dcl {
			b.SchemaChange()
		} else if _, dcl := n.(*ast.RevokeStmt); dcl {
			b.SchemaChange()
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
