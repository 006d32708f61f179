package plugin

import (
	"strconv"
	"strings"

	"github.com/freshread/freshread/lsnstore"
)

// Key values and their names. A key position is named by its column (or
// columns) and its value's canonical text form (lsnstore.KeyNameText):
// two values the database takes as equal in the key column must have one
// form, or a write of one would not be waited for by a read of the
// other. So a value is keyed only when its form is certain for the
// column's type (keyType.canon); anything else reads and writes by table.

// keyType is how a key column's values compare in the database, which
// decides their canonical form.
type keyType uint8

const (
	keyInt keyType = iota // an integer column: the value in decimal
)

// keyTypeTags name key types in signatures.
var keyTypeTags = [...]string{keyInt: "int"}

// canon is v's canonical form as a value of a column of type t, or ok
// false when it is not certain.
func (t keyType) canon(v any) (string, bool) {
	switch t {
	case keyInt:
		n, ok := integerValue(v)
		if !ok {
			return "", false
		}
		return strconv.FormatInt(n, 10), true
	}
	return "", false
}

// keyDef is a key a process keys a table by: its primary key (one column,
// or several in the catalog's order) or a KeyColumns column, with the
// type of each column.
type keyDef struct {
	cols  []string
	types []keyType
	// name is the columns joined by ",": the column part of the key's
	// names (lsnstore.KeyNameText, UnkeyedColumnName).
	name string
	// sig is the key's part of the table's key signature: the column
	// for one integer column, as every version signs it, else each
	// column with its type (keySignature).
	sig string
}

// newKeyDef is the key of cols, typed types (one each).
func newKeyDef(cols []string, types []keyType) *keyDef {
	k := &keyDef{cols: cols, types: types, name: strings.Join(cols, ",")}
	if k.integer() {
		k.sig = k.name
		return k
	}
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = c + ":" + keyTypeTags[types[i]]
	}
	k.sig = strings.Join(parts, ",")
	return k
}

// intKey is the key of one integer column.
func intKey(col string) *keyDef { return newKeyDef([]string{col}, []keyType{keyInt}) }

// integer reports whether k is one integer column.
func (k *keyDef) integer() bool { return len(k.cols) == 1 && k.types[0] == keyInt }

// single is k's column when it has one.
func (k *keyDef) single() (string, bool) {
	if len(k.cols) != 1 {
		return "", false
	}
	return k.cols[0], true
}

// same reports whether k and o are one key (nil: none).
func (k *keyDef) same(o *keyDef) bool {
	if k == nil || o == nil {
		return k == o
	}
	return k.sig == o.sig
}

// keyNameOf is the name of the position of table's rows whose key k holds
// the value of canonical form v.
func keyNameOf(table string, k *keyDef, v string) string {
	return lsnstore.KeyNameText(table, k.name, v)
}
