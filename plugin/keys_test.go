package plugin

import (
	"maps"
	"slices"
	"testing"

	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/lsnstore"
)

func TestPinningSQL(t *testing.T) {
	for _, tc := range []struct {
		sql  string
		vars []any
		want []string // nil: does not pin
	}{
		{"id = ?", []any{5}, []string{"5"}},
		{"`items`.`id` = ?", []any{uint(7)}, []string{"7"}},
		{`"items"."id"=?`, []any{int64(8)}, []string{"8"}},
		{"ID = ?", []any{9}, []string{"9"}},
		{"id IN ?", []any{[]int{1, 2}}, []string{"1", "2"}},
		{"id IN (?)", []any{[]uint{3}}, []string{"3"}},
		{"id IN (?, ?)", []any{4, 5}, []string{"4", "5"}},
		{"id = ?", []any{"5"}, nil},                     // a string: the collation decides
		{"id = ?", []any{5.0}, nil},                     // a float
		{"other.id = ?", []any{5}, nil},                 // another table's id
		{"name = ?", []any{5}, nil},                     // another column
		{"id > ?", []any{5}, nil},                       // a range
		{"id = ? OR 1 = 1", []any{5}, nil},              // more than the equality
		{"id IN (?, ?)", []any{4}, nil},                 // placeholders and vars disagree
		{"id = ?", []any{uint64(1 << 63)}, nil},         // beyond int64
		{"id IN ?", []any{make([]int, maxKeys+1)}, nil}, // too many keys
	} {
		got, ok := pinningSQL(tc.sql, tc.vars, "id", "items")
		if tc.want == nil {
			if ok {
				t.Errorf("pinningSQL(%q, %v) pins %v, want nothing", tc.sql, tc.vars, got)
			}
			continue
		}
		if !ok || !slices.Equal(got, tc.want) {
			t.Errorf("pinningSQL(%q, %v) = %v, %v; want %v", tc.sql, tc.vars, got, ok, tc.want)
		}
	}
}

func TestPinningExprColumns(t *testing.T) {
	for _, tc := range []struct {
		e    clause.Expression
		pins bool
	}{
		{clause.Eq{Column: "id", Value: 1}, true},
		{clause.Eq{Column: clause.Column{Table: clause.CurrentTable, Name: "id"}, Value: 1}, true},
		{clause.Eq{Column: clause.PrimaryColumn, Value: 1}, true},
		{clause.IN{Column: clause.Column{Table: "items", Name: "id"}, Values: []any{1, 2}}, true},
		{clause.Eq{Column: clause.Column{Table: "parts", Name: "id"}, Value: 1}, false},
		{clause.Eq{Column: clause.Column{Name: "id", Raw: true}, Value: 1}, false},
		{clause.Neq{Column: "id", Value: 1}, false},
	} {
		if _, ok := pinningExpr(tc.e, "id", "items", true); ok != tc.pins {
			t.Errorf("pinningExpr(%#v) pins = %v, want %v", tc.e, ok, tc.pins)
		}
	}
	// GORM's name for the primary key does not pin another column.
	if _, ok := pinningExpr(clause.Eq{Column: clause.PrimaryColumn, Value: 1}, "user_id", "items", false); ok {
		t.Error("clause.PrimaryColumn pinned user_id")
	}
}

// TestCapKeys: a write set with more than maxKeys key positions (a
// transaction of many keyed statements) publishes its tables plainly,
// raising their unkeyed positions; one within the cap is left alone.
func TestCapKeys(t *testing.T) {
	var w writeSet
	w.add([]string{lsnstore.KeyedTable("items"), lsnstore.UnkeyedColumnName("items", "item_id"), "other"})
	for i := 0; i < maxKeys; i++ {
		w.add([]string{lsnstore.KeyName("items", "id", int64(i))})
	}
	if got := capKeys(w); len(got.tables) != maxKeys+3 {
		t.Fatalf("within the cap: %d names, want %d", len(got.tables), maxKeys+3)
	}
	w.add([]string{lsnstore.KeyName("items", "id", maxKeys)})
	got := capKeys(w)
	want := map[string]struct{}{"items": {}, "other": {}}
	if !maps.Equal(got.tables, want) {
		t.Fatalf("past the cap: %v, want %v", got.tables, want)
	}
}
