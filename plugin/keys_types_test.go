package plugin

import (
	"database/sql"
	"database/sql/driver"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"gorm.io/gorm"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/lsnstore"
)

// TestIntegerKeyNamesUnchanged: an integer key's name is the one every
// earlier version gives it (lsnstore.KeyName), so processes of both
// versions sharing a store name the same rows the same way.
func TestIntegerKeyNamesUnchanged(t *testing.T) {
	for _, v := range []any{0, 1, 99, 100, -5, int8(-128), uint16(65535), int64(math.MaxInt64), int64(math.MinInt64), uint64(math.MaxInt64)} {
		got, ok := keyInt.canon(v)
		if !ok {
			t.Fatalf("%T %v: not canonical", v, v)
		}
		n, _ := integerValue(v)
		if name, want := lsnstore.KeyNameText("items", "id", got), lsnstore.KeyName("items", "id", n); name != want {
			t.Errorf("%T %v: %q, want %q", v, v, name, want)
		}
	}
	if sig := newKeyDef([]string{"id"}, []keyType{keyInt}).sig; sig != "id" {
		t.Errorf("an integer key's signature part is %q, want the column alone", sig)
	}
}

// textUUID is a driver.Valuer of a string kind whose Value is not its
// string: neither can be trusted.
type textUUID string

func (u textUUID) Value() (driver.Value, error) { return strings.ToUpper(string(u)) + "0", nil }

// pgtypeText is a string type with pgx's TextValue method.
type pgtypeText string

func (s pgtypeText) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(s), Valid: true}, nil
}

// byteUUID is a named array of 16 bytes without a Value method (pgx
// sends its bytes).
type byteUUID [16]byte

func TestUUIDValues(t *testing.T) {
	const c = "550e8400-e29b-41d4-a716-446655440000"
	u := uuid.MustParse(c)
	var nilUUID *uuid.UUID
	for _, tc := range []struct {
		v    any
		want string // "": not keyed
	}{
		{c, c},
		{strings.ToUpper(c), c},
		{"550e8400e29b41d4a716446655440000", ""}, // no hyphens: the servers accept it, we do not name it
		{"{550e8400-e29b-41d4-a716-446655440000}", ""}, // braces
		{"550e-8400-e29b-41d4-a716-4466-5544-0000", ""},
		{"550e8400-e29b-41d4-a716-44665544000g", ""},
		{" " + c, ""},
		{[16]byte(u), c},
		{byteUUID(u), c},
		{u, c},
		{&u, c},
		{nilUUID, ""},
		{uuid.NullUUID{UUID: u, Valid: true}, c},
		{uuid.NullUUID{}, ""},
		{textUUID(c), ""},
		{pgtype.UUID{Bytes: u, Valid: true}, ""}, // pgx's own types: by table
		{pgtypeText(c), ""},
		{[]byte(c), ""},
		{u[:], ""},
		{5, ""},
		{nil, ""},
	} {
		got, ok := keyUUID.canon(tc.v)
		if tc.want == "" {
			if ok {
				t.Errorf("%T %v: keyed as %q, want not keyed", tc.v, tc.v, got)
			}
			continue
		}
		if !ok || got != tc.want {
			t.Errorf("%T %v: %q, %v; want %q", tc.v, tc.v, got, ok, tc.want)
		}
	}
}

// TestTypedSignatures: a table keyed by an integer column is signed as
// every earlier version signs it; by a key of another type, with the
// type and another version, so that no process that types the key
// otherwise (or knows only integer keys) shares its signature.
func TestTypedSignatures(t *testing.T) {
	p := catalogPlugin(nil)
	for _, tc := range []struct {
		table string
		pk    *keyDef
		want  string
	}{
		{"items", intKey("id"), "v1:id;"},
		{"items", nil, "v1:;"},
		{"parts", intKey("id"), "v1:id;item_id"},
		{"tokens", newKeyDef([]string{"id"}, []keyType{keyUUID}), "v2:id:uuid;"},
		{"parts", newKeyDef([]string{"id"}, []keyType{keyUUID}), "v2:id:uuid;item_id"},
	} {
		if got := p.keySignature(tc.table, tc.pk); got != tc.want {
			t.Errorf("%s keyed by %+v: %q, want %q", tc.table, tc.pk, got, tc.want)
		}
	}
}

// Token is a model with a uuid primary key (github.com/google/uuid).
type Token struct {
	ID   uuid.UUID
	Name string
}

// TestUUIDKeyedStatements: with the catalog's uuid primary key, GORM
// reads and writes of a model keyed by a uuid name its rows by the
// canonical form; a value that is not certainly a uuid reads by table.
func TestUUIDKeyedStatements(t *testing.T) {
	const c = "550e8400-e29b-41d4-a716-446655440000"
	u := uuid.MustParse(c)
	p := catalogKeysPlugin(map[string]*keyDef{"tokens": newKeyDef([]string{"id"}, []keyType{keyUUID})}, classify.Postgres)
	key := lsnstore.KeyNameText("tokens", "id", c)
	db := dryDB(t).Session(&gorm.Session{SkipDefaultTransaction: true})
	for _, tc := range []struct {
		name  string
		query func(*gorm.DB) *gorm.DB
		keyed bool
	}{
		{"uuid.UUID", func(db *gorm.DB) *gorm.DB { return db.Where("id = ?", u) }, true},
		{"upper-case string", func(db *gorm.DB) *gorm.DB { return db.Where("id = ?", strings.ToUpper(c)) }, true},
		{"struct condition", func(db *gorm.DB) *gorm.DB { return db.Where(&Token{ID: u}) }, true},
		{"IN", func(db *gorm.DB) *gorm.DB { return db.Where("id IN ?", []uuid.UUID{u}) }, true},
		{"string without hyphens", func(db *gorm.DB) *gorm.DB { return db.Where("id = ?", strings.ReplaceAll(c, "-", "")) }, false},
		{"bytes", func(db *gorm.DB) *gorm.DB { return db.Where("id = ?", u[:]) }, false},
	} {
		var got []Token
		checkKeyedRead(t, p, "tokens", key, tc.name, tc.query(db.Model(&Token{})).Find(&got).Statement, tc.keyed)
	}

	write := func(what string, tx *gorm.DB, want bool) {
		t.Helper()
		checkBuiltWrite(t, p, "tokens", key, what, tx, want)
	}
	write("Update", db.Model(&Token{ID: u}).Update("name", "x"), true)
	write("Delete", db.Delete(&Token{ID: u}), true)
	write("Create", db.Create(&Token{ID: u, Name: "x"}), true)
	write("Create of a zero key", db.Create(&Token{Name: "x"}), false)
	write("Create omitting the key", db.Omit("id").Create(&Token{ID: u, Name: "x"}), false)
	write("Update of the key", db.Model(&Token{ID: u}).Update("id", uuid.New()), false)
	write("Update without a key", db.Model(&Token{}).Where("name = ?", "x").Update("name", "y"), false)
}

// Line is a model with a composite primary key: an integer and a uuid.
type Line struct {
	N       int       `gorm:"primaryKey;autoIncrement:false"`
	OrderID uuid.UUID `gorm:"primaryKey"`
	Name    string
}

// TestCompositeKeyedStatements: a composite primary key from the catalog
// keys a statement only when every column is pinned to one value, named
// by all columns in the catalog's order.
func TestCompositeKeyedStatements(t *testing.T) {
	const c = "550e8400-e29b-41d4-a716-446655440000"
	u := uuid.MustParse(c)
	// The catalog's order: order_id first.
	p := catalogKeysPlugin(map[string]*keyDef{"lines": newKeyDef([]string{"order_id", "n"}, []keyType{keyUUID, keyInt})}, classify.Postgres)
	key := lsnstore.KeyNameText("lines", "order_id,n", c+",3")
	db := dryDB(t).Session(&gorm.Session{SkipDefaultTransaction: true})
	for _, tc := range []struct {
		name  string
		query func(*gorm.DB) *gorm.DB
		keyed bool
	}{
		{"both columns", func(db *gorm.DB) *gorm.DB { return db.Where("n = ? AND order_id = ?", 3, u) }, true},
		{"struct condition", func(db *gorm.DB) *gorm.DB { return db.Where(&Line{N: 3, OrderID: u}) }, true},
		{"one column", func(db *gorm.DB) *gorm.DB { return db.Where("order_id = ?", u) }, false},
		{"two values of one column", func(db *gorm.DB) *gorm.DB { return db.Where("n IN ? AND order_id = ?", []int{3, 4}, u) }, false},
		{"a value that is not a uuid", func(db *gorm.DB) *gorm.DB { return db.Where("n = ? AND order_id = ?", 3, "x") }, false},
	} {
		var got []Line
		names, ok := checkKeyedRead(t, p, "lines", key, tc.name, tc.query(db.Model(&Line{})).Find(&got).Statement, tc.keyed)
		if ok && !slices.Contains(names, lsnstore.UnkeyedColumnName("lines", "order_id,n")) {
			t.Errorf("%s: names %v lack the key's unkeyed column position", tc.name, names)
		}
	}

	write := func(what string, tx *gorm.DB, want bool) {
		t.Helper()
		checkBuiltWrite(t, p, "lines", key, what, tx, want)
	}
	write("Update of the model", db.Model(&Line{N: 3, OrderID: u}).Update("name", "x"), true)
	write("Delete of the model", db.Delete(&Line{N: 3, OrderID: u}), true)
	write("Create", db.Create(&Line{N: 3, OrderID: u, Name: "x"}), true)
	write("Update by one column", db.Model(&Line{}).Where("order_id = ?", u).Update("name", "y"), false)
	write("Update of a key column", db.Model(&Line{N: 3, OrderID: u}).Update("n", 4), false)
	write("Delete of two rows", db.Delete(&[]Line{{N: 3, OrderID: u}, {N: 4, OrderID: u}}), false)
}

// checkBuiltWrite checks that a write of table by a model the plugin keys
// by the catalog's key proves key (want) or nothing.
func checkBuiltWrite(t *testing.T, p *Plugin, table, key, what string, tx *gorm.DB, want bool) {
	t.Helper()
	if tx.Error != nil {
		t.Fatal(tx.Error)
	}
	kw, ok := p.keyable(tx, table)
	if !ok || !kw.fromSQL {
		t.Fatalf("%s: keyable = %+v, %v", what, kw, ok)
	}
	names, ok := p.builtWriteNames(tx.Statement, kw)
	if ok != want || ok && !slices.Contains(names, key) {
		t.Errorf("%s: %s: names %v, %v; want keyed %v by %s", what, tx.Statement.SQL.String(), names, ok, want, key)
	}
}

// codeText is a named string type; codeValuer one whose Value is not its
// string.
type (
	codeText   string
	codeValuer string
)

func (c codeValuer) Value() (driver.Value, error) { return strings.ToLower(string(c)), nil }

func TestTextValues(t *testing.T) {
	text, pad := keyType{kind: kindText}, keyType{kind: kindTextPad}
	short := keyType{kind: kindText, maxLen: 4}
	for _, tc := range []struct {
		t    keyType
		v    any
		want string // "": not keyed
	}{
		{text, "abc", "abc"},
		{text, "a b  ", "a b  "}, // PostgreSQL: trailing spaces count
		{pad, "a b  ", "a b"},    // MariaDB's PAD SPACE: they do not
		{pad, "  a", "  a"},
		{pad, "  ", ""}, // the empty string, a value too
		{text, "#1, 100%", "%231%2c 100%25"},
		{text, "é", "é"},
		{text, "ab\xff", ""}, // not UTF-8
		{text, strings.Repeat("x", maxTextKey), strings.Repeat("x", maxTextKey)},
		{text, strings.Repeat("x", maxTextKey+1), ""},
		{short, "abcd", "abcd"},
		{short, "abcd ", ""}, // longer than the column: it may be stored truncated
		{text, codeText("x"), "x"},
		{text, codeValuer("X"), ""},
		{text, codeValuer("x"), "x"},
		{text, pgtypeText("x"), ""},
		{text, []byte("x"), ""},
		{text, 5, ""},
		{text, sql.NullString{String: "x", Valid: true}, ""},
		{text, nil, ""},
	} {
		got, ok := tc.t.canon(tc.v)
		if tc.want == "" && tc.v != "  " {
			if ok {
				t.Errorf("%s %T %q: keyed as %q, want not keyed", tc.t.tag(), tc.v, tc.v, got)
			}
			continue
		}
		if !ok || got != tc.want {
			t.Errorf("%s %T %q: %q, %v; want %q", tc.t.tag(), tc.v, tc.v, got, ok, tc.want)
		}
	}
	// Escaping keeps distinct values apart, and a value from splitting a
	// composite key or a name.
	a, _ := text.canon("a,b")
	b, _ := text.canon("a%2cb")
	if a == b || strings.ContainsAny(a, ",#") {
		t.Errorf("a,b is %q and a%%2cb is %q", a, b)
	}
}

// Code is a model with a text primary key.
type Code struct {
	Code string `gorm:"primaryKey"`
	Name string
}

// TestTextKeyedStatements: a text primary key from the catalog keys
// reads and writes by strings only.
func TestTextKeyedStatements(t *testing.T) {
	p := catalogKeysPlugin(map[string]*keyDef{"codes": newKeyDef([]string{"code"}, []keyType{{kind: kindTextPad}})}, classify.Postgres)
	key := lsnstore.KeyNameText("codes", "code", "a%2cb")
	db := dryDB(t).Session(&gorm.Session{SkipDefaultTransaction: true})
	for _, tc := range []struct {
		name  string
		query func(*gorm.DB) *gorm.DB
		keyed bool
	}{
		{"a string", func(db *gorm.DB) *gorm.DB { return db.Where("code = ?", "a,b") }, true},
		{"trailing spaces", func(db *gorm.DB) *gorm.DB { return db.Where("code = ?", "a,b  ") }, true},
		{"an integer", func(db *gorm.DB) *gorm.DB { return db.Where("code = ?", 5) }, false},
		{"a literal", func(db *gorm.DB) *gorm.DB { return db.Where("code = 'a,b'") }, false},
	} {
		var got []Code
		checkKeyedRead(t, p, "codes", key, tc.name, tc.query(db.Model(&Code{})).Find(&got).Statement, tc.keyed)
	}
	write := func(what string, tx *gorm.DB, want bool) {
		t.Helper()
		checkBuiltWrite(t, p, "codes", key, what, tx, want)
	}
	write("Update", db.Model(&Code{Code: "a,b"}).Update("name", "x"), true)
	write("Create", db.Create(&Code{Code: "a,b "}), true)
	write("Update by an integer", db.Model(&Code{}).Where("code = ?", 5).Update("name", "y"), false)
}

// checkKeyedRead checks that a read of table by stmt is keyed by key
// (want) or by table, and returns its names.
func checkKeyedRead(t *testing.T, p *Plugin, table, key, what string, stmt *gorm.Statement, want bool) ([]string, bool) {
	t.Helper()
	names, ok := p.keyedReadNames(stmt, table)
	if ok != want || ok && !slices.Contains(names, key) {
		t.Errorf("%s: %s: names %v, %v; want keyed %v by %s", what, stmt.SQL.String(), names, ok, want, key)
	}
	return names, ok
}
