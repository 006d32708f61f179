package lsnstore

import (
	"context"
	"strconv"
	"strings"
	"time"
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
//	SignedKeyedTable(t, sig)
//	                     Raise only: KeyedTable(t) by a writer keying t by
//	                     the key signature sig; the unkeyed position too
//	                     unless sig is t's signature in force (below).
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
	signedInfix        = "#k="
	signatureSuffix    = "#s"
)

// Key signatures. Processes sharing a store may key a table by different
// columns (KeyColumns differ between versions or services): a writer keys
// its write by the columns it knows, and a reader pinned to a column the
// writer does not know would not wait for it. So a store keeps, per table,
// one *key signature* (the key columns, as the plugin spells them), set by
// the first writer or reader that keys the table and kept while processes
// use it. A process whose signature is another reads the table by its
// table position and writes it plainly; and a keyed write checks the
// signature again in the raise itself (SignedKeyedTable), so a writer whose
// cached answer is out of date (the store lost its data, and another
// process claimed it since) raises the unkeyed position as well.

// KeySignatures is implemented by stores that keep key signatures.
type KeySignatures interface {
	// ClaimSignature records sig as table's key signature when it has
	// none and returns the signature in force: sig when it recorded it
	// or it was already. The answer holds for validFor (0: as long as
	// the store keeps its data): a store may let a signature that no
	// process claims or raises with expire, and another be recorded, but
	// not sooner than validFor after a claim that matched it.
	ClaimSignature(ctx context.Context, table, sig string) (inForce string, validFor time.Duration, err error)
}

// SignatureName is the name of table's key signature.
func SignatureName(table string) string { return table + signatureSuffix }

// SignedKeyedTable is the name, in Raise, of a write of table that proved
// which keys it touched, by a writer keying table by signature sig: the
// store raises table, and its unkeyed position as well unless sig is the
// table's signature in force (it records sig when the table has none).
// sig must not contain '#'.
func SignedKeyedTable(table, sig string) string { return table + signedInfix + sig }

// signedTarget splits a SignedKeyedTable name; ok is false for any other.
func signedTarget(name string) (table, sig string, ok bool) {
	i := strings.Index(name, signedInfix)
	if i < 0 {
		return "", "", false
	}
	return name[:i], name[i+len(signedInfix):], true
}

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
// holds the integer v: KeyNameText(table, col, v in decimal).
func KeyName(table, col string, v int64) string {
	return table + keyInfix + col + "=" + strconv.FormatInt(v, 10)
}

// KeyNameText is the name of the position of table's rows whose key
// column, or columns, cols (joined by ",") hold the value whose canonical
// text form is v: an integer in decimal (KeyName), or another form the
// writer and the reader agree on through the table's key signature. v
// must not contain '#', which separates the parts of names.
func KeyNameText(table, cols, v string) string {
	return table + keyInfix + cols + "=" + v
}

// BaseTable is the table a KeyedTable name is of; any other name (a
// table, a KeyName, an UnkeyedName) is returned as it is.
func BaseTable(name string) string {
	if t, ok := strings.CutSuffix(name, keyedSuffix); ok {
		return t
	}
	if t, _, ok := signedTarget(name); ok {
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
	if t, _, ok := signedTarget(name); ok {
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
