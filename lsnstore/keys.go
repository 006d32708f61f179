package lsnstore

import (
	"strconv"
	"strings"
)

// Positions by key (docs/design/keyed-positions.md). Besides a table's position,
// a store keeps its *unkeyed* position, raised by every write of the table
// that does not prove which rows it touched, and positions per key value,
// raised by writes that do. A read pinned to key values needs those keys'
// positions and the unkeyed one; any other read needs the table's, which
// every write raises.
//
// They travel as names in the tables lists of Raise and WritePosition:
//
//	t                    Raise: a write of t that proves nothing: raises t and
//	                     UnkeyedName(t). WritePosition: t's position.
//	KeyedTable(t)        Raise only: a write of t that proved its keys:
//	                     raises t, not its unkeyed position.
//	KeyName(t, col, v)   the position of t's rows whose col is v.
//	UnkeyedName(t)       WritePosition: t's unkeyed position.
//	UnkeyedColumnName(t, col)
//	                     the position of t's writes that proved keys of
//	                     other columns but not of col (a keyed write
//	                     raises it for each key column it did not prove).
//
// So every writer that knows nothing of keys (the tracker's direct
// writes, dependency raises, raw SQL) raises the unkeyed position without
// saying so. TableKey never produces these names from a table name: it
// escapes '#'.

const (
	unkeyedColumnInfix = "#u:"
	unkeyedSuffix      = "#u"
	keyedSuffix        = "#k"
	keyInfix           = "#k:"
)

// UnkeyedName is the name of table's unkeyed position.
func UnkeyedName(table string) string { return table + unkeyedSuffix }

// UnkeyedColumnName is the name of the position of table's writes that
// proved which keys of some column they touched but not which values of
// col: a read pinned to values of col needs it besides UnkeyedName.
func UnkeyedColumnName(table, col string) string { return table + unkeyedColumnInfix + col }

// KeyedTable is the name, in Raise, of a write of table that proved which
// keys it touched (listed with KeyName besides it).
func KeyedTable(table string) string { return table + keyedSuffix }

// KeyName is the name of the position of table's rows whose column col
// holds the integer v.
func KeyName(table, col string, v int64) string {
	return table + keyInfix + col + "=" + strconv.FormatInt(v, 10)
}

// BaseTable is the table a KeyedTable name is of; any other name (a
// table, a KeyName, an UnkeyedName) is returned as it is.
func BaseTable(name string) string {
	if t, ok := strings.CutSuffix(name, keyedSuffix); ok {
		return t
	}
	return name
}

// isKeyName reports whether name is a KeyName.
func isKeyName(name string) bool { return strings.Contains(name, keyInfix) }

// IsKeyName reports whether name is a KeyName.
func IsKeyName(name string) bool { return isKeyName(name) }

// KeyedBase returns the table a name of the keyed family (KeyedTable,
// KeyName, UnkeyedName, UnkeyedColumnName) is of, and whether name is one;
// a table name is returned as it is, with false.
func KeyedBase(name string) (table string, keyed bool) {
	if i := strings.IndexByte(name, '#'); i >= 0 {
		return name[:i], true
	}
	return name, false
}

// raiseTarget is what a name in Raise's list raises: the store name
// table, and with unkeyed also UnkeyedName(table). A plain table name
// raises both, KeyedTable(t) raises t alone, any other name itself.
func raiseTarget(name string) (table string, unkeyed bool) {
	if t, ok := strings.CutSuffix(name, keyedSuffix); ok {
		return t, false
	}
	return name, !strings.Contains(name, "#")
}

// raiseNames is the store names a Raise of names raises (raiseTarget);
// names is returned as it is when no name needs expanding.
func raiseNames(names []string) []string {
	expand := false
	for _, n := range names {
		if t, unkeyed := raiseTarget(n); unkeyed || t != n {
			expand = true
			break
		}
	}
	if !expand {
		return names
	}
	out := make([]string, 0, 2*len(names))
	for _, n := range names {
		t, unkeyed := raiseTarget(n)
		out = append(out, t)
		if unkeyed {
			out = append(out, UnkeyedName(t))
		}
	}
	return out
}
