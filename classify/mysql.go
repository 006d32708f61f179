package classify

import (
	"strings"

	"github.com/freshread/freshread/internal/engines"
)

// reasonNotLinked is the Reason of every MySQL result when MySQL and MariaDB
// support is not linked (see classifyMySQL).
const reasonNotLinked = "MySQL/MariaDB support is not linked: add " + engines.MySQLFamilyImport

// classifyMySQL lexes sql with the MySQL lexer (which validates quoting and
// comments and splits statements), parses each statement with TiDB's parser
// and walks its AST. Statements TiDB rejects (MariaDB syntax, incomplete
// SQL) fall back to the token-level analyzer.
//
// TiDB's parser is linked only by github.com/freshread/freshread/mysqlfamily
// (through internal/mysqlclassify). Without it every text is a Write to
// unknown tables, whose Reason names the import: the token-level analyzer
// alone is not trusted with every statement.
func (c *Classifier) classifyMySQL(sql string) Result {
	parse := engines.MySQLStatement
	if parse == nil {
		return Result{Kind: Write, UnknownTables: true, Reason: reasonNotLinked}
	}
	var buf [64]token
	toks, err := lexMySQL(sql, buf[:0])
	if err != nil {
		return unparseable()
	}
	b := &builder{}
	ta := &tokAnalyzer{c: c, d: MySQL, b: b}
	// MariaDB executable comments /*M! ... */ are invisible to TiDB.
	tokenOnly := strings.Contains(sql, "/*M!") || strings.Contains(sql, "/*m!")
	sink := &mysqlSink{c: c, b: b}

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
		if !tokenOnly && parse(text, sink) {
			continue
		}
		if err := ta.myStatement(st); err != nil {
			return unparseable()
		}
	}
	return b.result()
}

// mysqlSink is the engines.MySQLSink of a builder.
type mysqlSink struct {
	c *Classifier
	b *builder
}

var _ engines.MySQLSink = (*mysqlSink)(nil)

func (s *mysqlSink) Buffer()                                 { s.b.raise(Buffer) }
func (s *mysqlSink) Write()                                  { s.b.raise(Write) }
func (s *mysqlSink) Guess(reason string, unknownTables bool) { s.b.guess(reason, unknownTables) }
func (s *mysqlSink) TxnEnd()                                 { s.b.guess(ReasonTxnEnd, false) }
func (s *mysqlSink) Lock()                                   { s.b.lock() }
func (s *mysqlSink) SchemaChange()                           { s.b.schemaChange() }
func (s *mysqlSink) Catalog()                                { s.b.catalog = true }
func (s *mysqlSink) IsTemp(name string) bool                 { return s.b.isTemp(name) }
func (s *mysqlSink) AddTemp(name string)                     { s.b.addTemp(name) }
func (s *mysqlSink) AddRead(name string)                     { s.b.addRead(name) }
func (s *mysqlSink) AddWrite(name string)                    { s.b.addWrite(name) }

func (s *mysqlSink) Explain(walk func()) {
	m := s.b.mark()
	walk()
	s.b.restoreEffects(m)
}

// Function records a call of function name (lower case, possibly
// qualified) with nargs arguments.
func (s *mysqlSink) Function(name string, nargs int) {
	b := s.b
	switch name {
	case "setvar":
		b.raise(Buffer)
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
		b.raise(Buffer)
		return
	case fnLock:
		b.lock()
		return
	case fnWrite:
		b.guess("function "+name+" has side effects", true)
		return
	}
	if s.c.isReadOnlyUserFunc(name) {
		b.userFns = true
		return
	}
	b.guess("unknown function "+name, true)
}
