package plugin

import (
	"database/sql/driver"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"

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
type keyType struct {
	kind keyKind
	// maxLen is, for text, the longest value in bytes the column stores
	// as it is given (0: no limit but maxTextKey): PostgreSQL truncates
	// a varchar(n) value whose excess is spaces, and MariaDB and MySQL
	// outside strict mode truncate any, so a longer value in a Create
	// could name another row than the one stored.
	maxLen int
}

// keyKind is a kind of key column.
type keyKind uint8

const (
	kindInt  keyKind = iota // an integer column: the value in decimal
	kindUUID                // a uuid column: lower-case, hyphenated (8-4-4-4-12)
	// kindText is text compared byte for byte (PostgreSQL text and
	// varchar with a deterministic collation): the bytes, escaped.
	kindText
	// kindTextPad is text compared byte for byte but for trailing
	// spaces (MariaDB and MySQL _bin collations of utf8mb4: utf8mb4_bin
	// is PAD SPACE, 'a' = 'a '): the bytes without trailing spaces,
	// escaped. Right for NO PAD collations too: it only names two
	// values one way that the database tells apart, which makes reads
	// of one wait for writes of the other.
	kindTextPad
)

var (
	keyInt  = keyType{kind: kindInt}
	keyUUID = keyType{kind: kindUUID}
)

// kindTags name key kinds in signatures.
var kindTags = [...]string{kindInt: "int", kindUUID: "uuid", kindText: "text", kindTextPad: "text-pad"}

// tag names t in signatures.
func (t keyType) tag() string { return kindTags[t.kind] }

// canon is v's canonical form as a value of a column of type t, or ok
// false when it is not certain.
func (t keyType) canon(v any) (string, bool) {
	switch t.kind {
	case kindInt:
		n, ok := integerValue(v)
		if !ok {
			return "", false
		}
		return strconv.FormatInt(n, 10), true
	case kindUUID:
		return uuidValue(v)
	case kindText, kindTextPad:
		return t.textValue(v)
	}
	return "", false
}

// maxTextKey bounds the text keys named (in bytes): a longer value reads
// and writes by table.
const maxTextKey = 256

// textValue is the canonical form of v as a value of a text column of
// type t: a Go string (of any string type without a Value method, or
// whose Value is that string), valid UTF-8 (an invalid sequence may
// compare as another string), no longer than maxTextKey and t.maxLen;
// without its trailing spaces for kindTextPad; with '%', '#' and ','
// written as %25, %23 and %2c, so that a value never splits a name
// ('#') or a composite key (',').
func (t keyType) textValue(v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		if s, ok = stringKind(v); !ok {
			return "", false
		}
	}
	if len(s) > maxTextKey || t.maxLen > 0 && len(s) > t.maxLen || !utf8.ValidString(s) {
		return "", false
	}
	if t.kind == kindTextPad {
		s = strings.TrimRight(s, " ")
	}
	if !strings.ContainsAny(s, "%#,") {
		return s, true
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteString("%25")
		case '#':
			b.WriteString("%23")
		case ',':
			b.WriteString("%2c")
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// stringKind reads a value of a named string type: one without a Value
// method (drivers send the string), or whose Value is the same string;
// not one with pgx's TextValue method, which pgx sends instead.
func stringKind(v any) (string, bool) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.String {
		return "", false
	}
	if _, ok := v.(pgtype.TextValuer); ok {
		return "", false // pgx sends what its method says
	}
	s := rv.String()
	if vr, ok := v.(driver.Valuer); ok {
		dv, err := vr.Value()
		if ds, isString := dv.(string); err != nil || !isString || ds != s {
			return "", false
		}
	}
	return s, true
}

// uuidValue is the canonical form of v as a value of a uuid column
// (PostgreSQL's uuid, MariaDB's UUID): a string in the 8-4-4-4-12 form of
// either case, a [16]byte (or an array type of 16 bytes), or a
// driver.Valuer whose Value is such a string (github.com/google/uuid's
// UUID is one) and, when its own kind is a string or 16 bytes (which a
// driver may send instead), that value too; not a value with pgx's
// UUIDValue or TextValue methods, which pgx sends instead. Both servers accept other
// spellings (no hyphens, braces, hyphens elsewhere): those read and
// write by table, as does anything else.
func uuidValue(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return canonUUID(x)
	case [16]byte:
		return formatUUID(x), true
	case pgtype.UUIDValuer, pgtype.TextValuer:
		return "", false // pgx sends what these methods say
	case driver.Valuer:
		return valuerUUID(x)
	}
	return underlyingUUID(reflect.ValueOf(v))
}

// underlyingUUID reads a value of a named string type, or of an array
// type of 16 bytes, as a uuid.
func underlyingUUID(rv reflect.Value) (string, bool) {
	switch {
	case rv.Kind() == reflect.String:
		return canonUUID(rv.String())
	case rv.Kind() == reflect.Array && rv.Len() == 16 && rv.Type().Elem().Kind() == reflect.Uint8:
		var b [16]byte
		for i := range b {
			b[i] = byte(rv.Index(i).Uint())
		}
		return formatUUID(b), true
	}
	return "", false
}

// valuerUUID reads a driver.Valuer as a uuid: its Value must be a uuid
// string, and agree with the value's own kind when that is a string or
// 16 bytes. A nil pointer is NULL.
func valuerUUID(v driver.Valuer) (string, bool) {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return "", false
		}
		rv = rv.Elem()
	}
	dv, err := v.Value()
	if err != nil {
		return "", false
	}
	s, ok := dv.(string)
	if !ok {
		return "", false
	}
	c, ok := canonUUID(s)
	if !ok {
		return "", false
	}
	if rv.Kind() == reflect.String || rv.Kind() == reflect.Array {
		if u, ok := underlyingUUID(rv); !ok || u != c {
			return "", false
		}
	}
	return c, true
}

// canonUUID is s lower-cased when it is a uuid in the 8-4-4-4-12 form.
func canonUUID(s string) (string, bool) {
	if len(s) != 36 {
		return "", false
	}
	upper := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return "", false
			}
		case '0' <= c && c <= '9' || 'a' <= c && c <= 'f':
		case 'A' <= c && c <= 'F':
			upper = true
		default:
			return "", false
		}
	}
	if !upper {
		return s, true
	}
	return strings.ToLower(s), true
}

// formatUUID is b in the canonical form.
func formatUUID(b [16]byte) string {
	const hex = "0123456789abcdef"
	var out [36]byte
	j := 0
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out[j] = '-'
			j++
		}
		out[j], out[j+1] = hex[c>>4], hex[c&0xf]
		j += 2
	}
	return string(out[:])
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

// maxKeyColumns bounds the columns of a composite key.
const maxKeyColumns = 8

// newKeyDef is the key of cols, typed types (one each).
func newKeyDef(cols []string, types []keyType) *keyDef {
	k := &keyDef{cols: cols, types: types, name: strings.Join(cols, ",")}
	if k.integer() {
		k.sig = k.name
		return k
	}
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = c + ":" + types[i].tag()
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
