package classify

// insertStop are words an INSERT read for its pins must not hold past its
// INTO: a subquery or INSERT ... SELECT, a CTE, a set operation, another
// INTO.
var insertStop = toSet(`select with union intersect except into lateral exists`)

// insertStmt: INSERT INTO t [AS a] (c1, ...) [OVERRIDING SYSTEM VALUE]
// VALUES (v, ...), ... [ON CONFLICT ...] [RETURNING ...] (see Pinned).
func (p *pinParser) insertStmt() *Pinned {
	if !p.tok(1).is("into") {
		return nil // INSERT IGNORE, LOW_PRIORITY, DELAYED, INSERT without INTO
	}
	for i := 2; i < len(p.st); i++ {
		if inSet(insertStop, p.st[i]) {
			return nil
		}
	}
	i, ok := p.insertTarget(2)
	if !ok {
		return nil
	}
	cols, i, ok := p.insertColumns(i)
	if !ok {
		return nil
	}
	if p.d == Postgres && p.tok(i).is("overriding") {
		// OVERRIDING USER VALUE ignores the values given for identity
		// columns: the database assigns them.
		if !p.tok(i+1).is("system") || !p.tok(i+2).is("value") {
			return nil
		}
		i += 3
	}
	if !p.tok(i).is("values") && !(p.d == MySQL && p.tok(i).is("value")) {
		return nil // INSERT ... SELECT, DEFAULT VALUES, SET, ROW(...)
	}
	pins := make([]Pin, len(cols))
	for k, c := range cols {
		pins[k].Column = c
	}
	known := make([]bool, len(cols))
	for k := range known {
		known[k] = true
	}
	rows := 0
	i++
	for {
		next, ok := p.insertRow(pins, known, i)
		if !ok {
			return nil
		}
		rows++
		i = next
		if !p.tok(i).op(",") {
			break
		}
		i++
	}
	pn := &Pinned{Table: p.table, Rows: rows}
	keep := known
	switch t := p.tok(i); {
	case i == len(p.st) || t.is("returning"):
	case p.d == Postgres && t.is("on") && p.tok(i+1).is("conflict"):
		upsert, target, sets, ok := p.onConflict(i + 2)
		if !ok {
			return nil
		}
		if upsert {
			pn.Upsert = true
			keep = p.upsertPinned(cols, known, target, sets)
		}
	default:
		return nil // ON DUPLICATE KEY UPDATE, a row alias, anything else
	}
	for k := range pins {
		if keep[k] {
			pn.Pins = append(pn.Pins, pins[k])
		}
	}
	if r := p.until(i, func(t token) bool { return t.is("returning") }); r < len(p.st) {
		pn.Returning = p.returningItems(r + 1)
	}
	return pn
}

// returningItems reads a RETURNING list from i to the end: each item's
// plain column, or "" (see Pinned.Returning); nil when an item is a star
// or the list is empty.
func (p *pinParser) returningItems(i int) []string {
	var items []string
	for i < len(p.st) {
		end := p.itemEnd(i)
		if end == i || end < len(p.st) && !p.tok(end).op(",") {
			return nil
		}
		if end == i+1 && p.tok(i).op("*") || end == i+3 && p.tok(i+1).op(".") && p.tok(i+2).op("*") {
			return nil // the columns behind a star are the table's
		}
		col, next, ok := p.column(i)
		if !ok || next != end {
			col = ""
		}
		items = append(items, col)
		i = end + 1
	}
	return items
}

// insertTarget reads the table name at i, and PostgreSQL's `AS alias`;
// the column list must follow.
func (p *pinParser) insertTarget(i int) (int, bool) {
	i, ok := p.tableName(i)
	if !ok {
		return i, false
	}
	if p.d == Postgres && p.tok(i).is("as") {
		if !p.isName(i + 1) {
			return i, false
		}
		p.alias = p.tok(i + 1).text
		i += 2
	}
	return i, p.tok(i).op("(")
}

// insertColumns reads the column list `(c1, c2, ...)` at i: plain names
// (no subfield, subscript or qualifier), each once.
func (p *pinParser) insertColumns(i int) ([]string, int, bool) {
	if !p.tok(i).op("(") {
		return nil, i, false
	}
	var cols []string
	i++
	for {
		if !p.isName(i) {
			return nil, i, false
		}
		c := p.tok(i).text
		for _, o := range cols {
			if o == c {
				return nil, i, false
			}
		}
		cols = append(cols, c)
		i++
		switch {
		case p.tok(i).op(","):
			i++
		case p.tok(i).op(")"):
			return cols, i + 1, true
		default:
			return nil, i, false
		}
	}
}

// insertRow reads one row `(v, v, ...)` at i, one item for each pin: an
// item that is a value is appended to its pin's Values; any other marks
// its column not known. It returns the index after the row.
func (p *pinParser) insertRow(pins []Pin, known []bool, i int) (int, bool) {
	if !p.tok(i).op("(") {
		return i, false
	}
	j := i + 1
	for k := range pins {
		end := p.itemEnd(j)
		if end == j || end >= len(p.st) {
			return i, false
		}
		if v, ok := p.value(j, end); ok {
			pins[k].Values = append(pins[k].Values, v)
		} else {
			known[k] = false
		}
		last := k == len(pins)-1
		if last != p.tok(end).op(")") {
			return i, false // more or fewer items than columns
		}
		j = end + 1
	}
	return j, true
}

// onConflict reads PostgreSQL's ON CONFLICT clause from i (after the two
// words): upsert reports DO UPDATE; target lists the conflict target's
// columns when it is a list of plain columns (nil: ON CONSTRAINT, an
// expression, a collation or an operator class), sets DO UPDATE's
// assignments. Only RETURNING may follow.
func (p *pinParser) onConflict(i int) (upsert bool, target []string, sets []Set, ok bool) {
	switch {
	case p.tok(i).op("("):
		end := p.itemEnd(i + 1)
		for end < len(p.st) && p.tok(end).op(",") {
			end = p.itemEnd(end + 1)
		}
		if end >= len(p.st) {
			return false, nil, nil, false
		}
		target = p.conflictColumns(i+1, end)
		i = end + 1
		if p.tok(i).is("where") { // an index predicate
			i = p.until(i+1, func(t token) bool { return t.is("do") })
		}
	case p.tok(i).is("on") && p.tok(i+1).is("constraint") && p.isName(i+2):
		i += 3
	}
	if !p.tok(i).is("do") {
		return false, nil, nil, false
	}
	switch {
	case p.tok(i + 1).is("nothing"):
		i += 2
	case p.tok(i+1).is("update") && p.tok(i+2).is("set"):
		upsert = true
		sets, i, ok = p.conflictSets(i + 3)
		if !ok {
			return false, nil, nil, false
		}
		if p.tok(i).is("where") {
			i = p.until(i+1, func(t token) bool { return t.is("returning") })
		}
	default:
		return false, nil, nil, false
	}
	if i != len(p.st) && !p.tok(i).is("returning") {
		return false, nil, nil, false
	}
	return upsert, target, sets, true
}

// conflictColumns reads a conflict target's columns st[i:end], or nil
// when an item is not a plain column.
func (p *pinParser) conflictColumns(i, end int) []string {
	var cols []string
	for i < end {
		if !p.isName(i) || i+1 != end && !p.tok(i+1).op(",") {
			return nil
		}
		cols = append(cols, p.tok(i).text)
		i += 2
	}
	return cols
}

// conflictSets reads DO UPDATE's `col = v, ...` from i, up to its WHERE,
// RETURNING or the end.
func (p *pinParser) conflictSets(i int) ([]Set, int, bool) {
	var sets []Set
	for {
		col, next, ok := p.column(i)
		if !ok || !p.tok(next).op("=") {
			return nil, i, false
		}
		end := p.until(next+1, func(t token) bool { return t.op(",") || t.is("where") || t.is("returning") })
		if end == next+1 {
			return nil, i, false
		}
		s := Set{Column: col}
		s.Value, s.Known = p.value(next+1, end)
		sets = append(sets, s)
		i = end
		if !p.tok(i).op(",") {
			return sets, i, true
		}
		i++
	}
}

// upsertPinned reports which of an upsert's columns stay pinned: those of
// the conflict target (an updated row equals a listed row there) that DO
// UPDATE does not assign.
func (p *pinParser) upsertPinned(cols []string, known []bool, target []string, sets []Set) []bool {
	keep := make([]bool, len(cols))
	for k, c := range cols {
		if !known[k] {
			continue
		}
		inTarget := false
		for _, t := range target {
			if t == c {
				inTarget = true
			}
		}
		for _, s := range sets {
			if s.Column == c {
				inTarget = false // the row moves to another value
			}
		}
		keep[k] = inTarget
	}
	return keep
}

// itemEnd returns the index of the first `,` or `)` from i outside the
// parentheses opened after i (the end of a list item), or len(st).
func (p *pinParser) itemEnd(i int) int {
	depth := 0
	for ; i < len(p.st); i++ {
		switch t := p.st[i]; {
		case t.op("("):
			depth++
		case t.op(")"):
			if depth == 0 {
				return i
			}
			depth--
		case t.op(",") && depth == 0:
			return i
		}
	}
	return i
}
