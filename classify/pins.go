package classify

import "strconv"

// Pinned is what the WHERE clause of a single-table SELECT, UPDATE or
// DELETE, or the VALUES list of an INSERT, proves about the rows the
// statement touches: every such row has, for each Pin, one of the Pin's
// values in its column. It is reported (Result.Pinned) only for one
// statement of the narrow form
//
//	SELECT ... FROM t [[AS] a] WHERE c1 AND c2 ... [GROUP BY | ORDER BY | LIMIT ...]
//	UPDATE t [[AS] a] SET col = v, ... WHERE c1 AND c2 ... [ORDER BY | LIMIT | RETURNING ...]
//	DELETE FROM t [[AS] a] WHERE c1 AND c2 ... [ORDER BY | LIMIT | RETURNING ...]
//
// with no subquery, join, set operation, CASE or OR in it, or of the form
// (an insert, below)
//
//	INSERT INTO t [AS a] (c1, c2, ...) [OVERRIDING SYSTEM VALUE] VALUES (v, v, ...), ... [ON CONFLICT ...] [RETURNING ...]
//
// A condition pins a column when it is exactly `col = v`, `v = col`,
// `col IN (v, ...)` or (PostgreSQL) `col = ANY(v)`, where v is an integer
// literal or a placeholder; any other condition is ANDed and only
// narrows, so it is ignored. Nothing is said about the column's type: a
// caller that keys rows by a column must know it to be an integer column.
//
// An INSERT pins each listed column whose value is an integer literal or
// a placeholder in every row (Rows: one Value per row, in row order); a
// column given anything else in some row (DEFAULT, NULL, an expression, a
// string) is not pinned, nor is a column the list leaves out (the
// database assigns it). Only these forms are read: INSERT ... SELECT,
// DEFAULT VALUES, a CTE, a subquery anywhere, MySQL's INSERT IGNORE (which
// stores an out-of-range value clipped), any modifier, PARTITION, the SET
// form, a row alias, ON DUPLICATE KEY UPDATE (it updates a row conflicting
// on any unique key), PostgreSQL's OVERRIDING USER VALUE (the database
// assigns identity columns) and REPLACE give nil. ON CONFLICT ... DO
// NOTHING inserts listed rows or none. ON CONFLICT (c, ...) DO UPDATE
// (Upsert) may update an existing row instead, one equal to a listed row
// in the conflict target's columns (under the arbiter index's equality,
// which is the column type's unless the index has another collation or
// operator class): only those columns stay pinned, less any that DO
// UPDATE assigns; ON CONFLICT ON CONSTRAINT pins none.
type Pinned struct {
	// Table is the table, normalized as in Result.Reads and Result.Writes.
	Table string
	// Pins lists the pinned columns, in WHERE order (an INSERT's: in
	// its column list's order).
	Pins []Pin
	// Sets lists an UPDATE's assignments (nil for SELECT, DELETE and
	// INSERT).
	Sets []Set
	// Rows is the number of rows an INSERT lists (0 for SELECT, UPDATE
	// and DELETE); each of its Pins holds one Value per row, the i-th
	// row's i-th.
	Rows int
	// Upsert marks an INSERT ... ON CONFLICT ... DO UPDATE (PostgreSQL):
	// a row it touches is a listed row or an existing row equal to one
	// in the conflict target's columns under the arbiter index's
	// equality.
	Upsert bool
	// Returning lists an INSERT's RETURNING items in order (nil for
	// SELECT, UPDATE and DELETE, for an INSERT without RETURNING, and for
	// one whose list has a star): the column an item returns when it is a
	// plain column of the table, without an alias (named as in Pins),
	// else "". The result's k-th column is then that column's value.
	Returning []string
}

// Pin is one pinning condition: the column holds one of Values.
type Pin struct {
	// Column is the column name: lower-cased unless quoted (PostgreSQL
	// keeps a quoted identifier's case; MySQL names are case-insensitive
	// and lower-cased).
	Column string
	// Values are the values the column is compared with (several for IN
	// or ANY).
	Values []Value
}

// Set is one assignment of an UPDATE. Known reports whether Value is the
// assigned value (an integer literal or a placeholder); otherwise the
// column is set to an expression.
type Set struct {
	// Column is the column assigned, named as Pin.Column is.
	Column string
	// Value is the assigned value when Known.
	Value Value
	// Known: the column is set to Value, not to an expression.
	Known bool
}

// Value is an integer literal (Param 0) or the statement's Param-th
// argument, counting from 1 ($n on PostgreSQL, the n-th ? on MySQL).
// Array marks `col = ANY($n)`: the argument is an array of values.
type Value struct {
	// Param is the argument's number, from 1; 0 for a literal.
	Param int
	// Int is the literal's value when Param is 0.
	Int int64
	// Array: the argument is an array of values (col = ANY($n)).
	Array bool
}

// pinned returns the Pinned of one statement's tokens, or nil.
func pinned(d Dialect, st []token) *Pinned {
	params := paramOrdinals(st)
	if params == nil {
		return nil
	}
	if st[0].is("insert") {
		p := &pinParser{d: d, st: st, params: params}
		return p.insertStmt()
	}
	for i, t := range st {
		if i > 0 && t.kind == tIdent {
			switch t.text {
			case "select", "join", "union", "intersect", "except", "into", "with", "case", "or", "xor",
				"lateral", "natural", "straight_join", "exists", "between":
				return nil
			}
		}
		if t.op("||") && d == MySQL {
			return nil // OR unless PIPES_AS_CONCAT
		}
	}
	p := &pinParser{d: d, st: st, params: params}
	switch st[0].text {
	case "select":
		return p.selectStmt()
	case "update":
		return p.updateStmt()
	case "delete":
		return p.deleteStmt()
	}
	return nil
}

// paramOrdinals numbers the placeholders of st (index → ordinal; 0 for a
// token that is not one). nil when a placeholder cannot be numbered.
func paramOrdinals(st []token) []int {
	out := make([]int, len(st))
	q := 0
	for i, t := range st {
		if t.kind != tParam {
			continue
		}
		switch {
		case t.text == "?":
			q++
			out[i] = q
		case len(t.text) > 1 && t.text[0] == '$':
			n, err := strconv.Atoi(t.text[1:])
			if err != nil || n <= 0 {
				return nil
			}
			out[i] = n
		default:
			return nil // :name
		}
	}
	return out
}

type pinParser struct {
	d      Dialect
	st     []token
	params []int
	table  string
	alias  string
}

func (p *pinParser) tok(i int) token {
	if i >= 0 && i < len(p.st) {
		return p.st[i]
	}
	return token{}
}

func (p *pinParser) isName(i int) bool {
	k := p.tok(i).kind
	return k == tIdent || k == tQIdent
}

// target reads the table name and optional alias at i; ok is false when
// what follows is not a single plain table.
func (p *pinParser) target(i int) (int, bool) {
	i, ok := p.tableName(i)
	if !ok {
		return i, false
	}
	switch t := p.tok(i); {
	case t.is("as"):
		if !p.isName(i + 1) {
			return i, false
		}
		p.alias = p.tok(i + 1).text
		i += 2
	case t.kind == tQIdent || t.kind == tIdent && !inSet(aliasStop, t) && !t.is("only"):
		p.alias = t.text
		i++
	}
	if t := p.tok(i); t.op(",") || t.op("(") || t.is("using") || t.is("from") || t.is("partition") {
		return i, false
	}
	return i, true
}

// tableName reads a table name ([catalog.][schema.]table) at i into
// p.table, and its last part into p.alias.
func (p *pinParser) tableName(i int) (int, bool) {
	var parts [3]string
	n := 0
	for {
		if !p.isName(i) || n == len(parts) || p.tok(i).is("only") {
			return i, false
		}
		parts[n] = p.tok(i).text
		n++
		i++
		if !p.tok(i).op(".") {
			break
		}
		i++
	}
	p.table = joinName(parts[:n])
	p.alias = parts[n-1]
	return i, true
}

// selectStmt: SELECT ... FROM t [alias] WHERE ...
func (p *pinParser) selectStmt() *Pinned {
	i := p.until(1, func(t token) bool { return t.is("from") })
	if i == len(p.st) {
		return nil
	}
	return p.targetWhere(i + 1)
}

// targetWhere reads `t [alias] WHERE ...` from i.
func (p *pinParser) targetWhere(i int) *Pinned {
	i, ok := p.target(i)
	if !ok || !p.tok(i).is("where") {
		return nil
	}
	pins, ok := p.where(i + 1)
	if !ok {
		return nil
	}
	return &Pinned{Table: p.table, Pins: pins}
}

// updateStmt: UPDATE t [alias] SET col = v, ... WHERE ...
func (p *pinParser) updateStmt() *Pinned {
	i, ok := p.target(1)
	if !ok || !p.tok(i).is("set") {
		return nil
	}
	i++
	sets := []Set{}
	for {
		col, next, ok := p.column(i)
		if !ok || !p.tok(next).op("=") {
			return nil
		}
		end := p.until(next+1, func(t token) bool { return t.op(",") || t.is("where") || t.is("from") })
		s := Set{Column: col}
		if end == next+2 || end == next+3 {
			s.Value, s.Known = p.value(next+1, end)
		}
		sets = append(sets, s)
		i = end
		if p.tok(i).op(",") {
			i++
			continue
		}
		break
	}
	if !p.tok(i).is("where") {
		return nil
	}
	pins, ok := p.where(i + 1)
	if !ok {
		return nil
	}
	return &Pinned{Table: p.table, Pins: pins, Sets: sets}
}

// deleteStmt: DELETE FROM t [alias] WHERE ...
func (p *pinParser) deleteStmt() *Pinned {
	if !p.tok(1).is("from") {
		return nil
	}
	return p.targetWhere(2)
}

// whereEnd are the keywords that end a WHERE clause at depth 0.
var whereEnd = toSet(`group order limit offset fetch for lock window having returning`)

// until returns the index of the first depth-0 token from i that stop
// accepts, or len(st).
func (p *pinParser) until(i int, stop func(token) bool) int {
	depth := 0
	for ; i < len(p.st); i++ {
		t := p.st[i]
		switch {
		case t.op("("):
			depth++
		case t.op(")"):
			depth--
		case depth == 0 && stop(t):
			return i
		}
	}
	return i
}

// where splits the WHERE clause from i at depth-0 ANDs and keeps the
// conditions that pin a column. ok is false when the clause has an OR
// (rejected up front) or is empty.
func (p *pinParser) where(i int) ([]Pin, bool) {
	end := p.until(i, func(t token) bool { return inSet(whereEnd, t) })
	if end == i {
		return nil, false
	}
	var pins []Pin
	for i < end {
		c := p.until(i, func(t token) bool { return t.is("and") || t.op("&&") })
		if c > end {
			c = end
		}
		if p.tok(i).op("(") {
			if tp, ok := p.tuplePins(i, c); ok {
				pins = append(pins, tp...)
			}
		} else if pin, ok := p.pin(i, c); ok {
			pins = append(pins, pin)
		}
		i = c + 1
	}
	return pins, true
}

// pin reads one condition st[i:end].
func (p *pinParser) pin(i, end int) (Pin, bool) {
	if col, next, ok := p.column(i); ok {
		switch t := p.tok(next); {
		case t.op("=") && p.tok(next+1).is("any") && p.d == Postgres:
			// col = ANY ( $n )
			if end != next+5 || !p.tok(next+2).op("(") || !p.tok(next+4).op(")") || p.params[next+3] == 0 {
				return Pin{}, false
			}
			return Pin{Column: col, Values: []Value{{Param: p.params[next+3], Array: true}}}, true
		case t.op("="):
			if v, ok := p.value(next+1, end); ok {
				return Pin{Column: col, Values: []Value{v}}, true
			}
		case t.is("in"):
			return p.inList(col, next+1, end)
		}
		return Pin{}, false
	}
	// v = col
	for j := i + 1; j <= i+2 && j < end; j++ {
		if p.tok(j).op("=") {
			v, ok := p.value(i, j)
			if !ok {
				return Pin{}, false
			}
			col, next, ok := p.column(j + 1)
			if !ok || next != end {
				return Pin{}, false
			}
			return Pin{Column: col, Values: []Value{v}}, true
		}
	}
	return Pin{}, false
}

// tuplePins reads `(c1, c2, ...) IN ((v, v, ...), ...)` or `(c1, c2, ...)
// = (v, v, ...)` filling st[i:end] (GORM's condition on a composite
// primary key): one Pin per column, with the column's value in each
// tuple, in order.
func (p *pinParser) tuplePins(i, end int) ([]Pin, bool) {
	var pins []Pin
	j := i + 1
	for {
		col, next, ok := p.column(j)
		if !ok {
			return nil, false
		}
		pins = append(pins, Pin{Column: col})
		j = next
		if p.tok(j).op(",") {
			j++
			continue
		}
		if !p.tok(j).op(")") {
			return nil, false
		}
		j++
		break
	}
	switch t := p.tok(j); {
	case t.op("="):
		next, ok := p.tuple(pins, j+1, end)
		return pins, ok && next == end
	case t.is("in"):
		if !p.tok(j+1).op("(") || !p.tok(end-1).op(")") {
			return nil, false
		}
		j += 2
		for {
			next, ok := p.tuple(pins, j, end-1)
			if !ok {
				return nil, false
			}
			if next == end-1 {
				return pins, true
			}
			if !p.tok(next).op(",") {
				return nil, false
			}
			j = next + 1
		}
	}
	return nil, false
}

// tuple reads `(v, v, ...)` from i (before end), one value for each of
// pins, appending it; it returns the index after the tuple.
func (p *pinParser) tuple(pins []Pin, i, end int) (int, bool) {
	if !p.tok(i).op("(") {
		return i, false
	}
	j := i + 1
	for n := range pins {
		k := j
		for k < end && !p.tok(k).op(",") && !p.tok(k).op(")") {
			k++
		}
		v, ok := p.value(j, k)
		if !ok || k == end {
			return i, false
		}
		pins[n].Values = append(pins[n].Values, v)
		if n == len(pins)-1 {
			if !p.tok(k).op(")") {
				return i, false
			}
			return k + 1, true
		}
		if !p.tok(k).op(",") {
			return i, false
		}
		j = k + 1
	}
	return i, false
}

// inList reads ( v, v, ... ) filling st[i:end].
func (p *pinParser) inList(col string, i, end int) (Pin, bool) {
	if !p.tok(i).op("(") || !p.tok(end-1).op(")") {
		return Pin{}, false
	}
	pin := Pin{Column: col}
	j := i + 1
	for j < end-1 {
		k := j
		for k < end-1 && !p.tok(k).op(",") {
			k++
		}
		v, ok := p.value(j, k)
		if !ok {
			return Pin{}, false
		}
		pin.Values = append(pin.Values, v)
		j = k + 1
		if k == end-1 {
			break
		}
	}
	if len(pin.Values) == 0 || j != end {
		return Pin{}, false
	}
	return pin, true
}

// column reads a column reference ([table-or-alias.]col) at i.
func (p *pinParser) column(i int) (string, int, bool) {
	if !p.isName(i) {
		return "", i, false
	}
	if p.tok(i + 1).op(".") {
		q := p.tok(i).text
		if q != p.alias && q != p.table || !p.isName(i+2) || p.tok(i+3).op(".") {
			return "", i, false
		}
		i += 2
	}
	t := p.tok(i)
	if t.kind == tIdent && !plainColumn(t.text) {
		return "", i, false
	}
	return t.text, i + 1, true
}

// plainColumn reports whether an unquoted word can be a column name here
// (not a keyword that starts an expression).
func plainColumn(w string) bool {
	switch w {
	case "not", "null", "true", "false", "any", "all", "some", "array", "row", "interval",
		"current_date", "current_time", "current_timestamp", "localtime", "localtimestamp",
		"current_user", "session_user", "user", "default", "binary", "distinct":
		return false
	}
	return true
}

// value reads an integer literal (optionally signed) or a placeholder
// filling st[i:end] exactly.
func (p *pinParser) value(i, end int) (Value, bool) {
	neg := false
	if end-i == 2 && (p.tok(i).op("-") || p.tok(i).op("+")) {
		neg = p.tok(i).op("-")
		i++
	}
	if end-i != 1 {
		return Value{}, false
	}
	t := p.tok(i)
	switch t.kind {
	case tParam:
		if neg || p.params[i] == 0 {
			return Value{}, false
		}
		return Value{Param: p.params[i]}, true
	case tNumber:
		for k := 0; k < len(t.text); k++ {
			if !isDigit(t.text[k]) {
				return Value{}, false
			}
		}
		n, err := strconv.ParseInt(t.text, 10, 64)
		if err != nil {
			return Value{}, false
		}
		if neg {
			n = -n
		}
		return Value{Int: n}, true
	}
	return Value{}, false
}
