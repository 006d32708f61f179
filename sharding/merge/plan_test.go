package merge

import (
	"strings"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

func TestParseSelItem(t *testing.T) {
	for _, c := range []struct {
		in, agg, arg, alias, col, why string
	}{
		{in: "status", col: "status"},
		{in: `"orders"."Status"`, col: "Status"},
		{in: "sum(amount) AS total", agg: "sum", arg: "amount", alias: "total"},
		{in: "avg(amount) mean", agg: "avg", arg: "amount", alias: "mean"},
		{in: "count(*)", agg: "count", arg: "*"},
		{in: "amount % 4 AS bucket", alias: "bucket"},
		{in: "count(distinct user_id)", agg: "countd", arg: "user_id"},
		{in: `COUNT(DISTINCT("user_id"))`, agg: "countd", arg: `("user_id")`},
		{in: "count(DISTINCT (user_id, amount))", why: "several"},
		{in: "sum(distinct amount)", why: "DISTINCT"},
		{in: "sum(amount) / count(*) AS r", why: "inside an expression"},
		{in: "string_agg(status, ',')", why: "other than"},
		{in: "row_number() over (order by id)", why: "window"},
		{in: "sum(max(amount))", why: "nested"},
	} {
		it, why := parseSelItem(c.in)
		if c.why != "" {
			if why == "" || !contains(why, c.why) {
				t.Errorf("%q: why %q, want %q", c.in, why, c.why)
			}
			continue
		}
		if why != "" || it.agg != c.agg || it.arg != c.arg || it.alias != c.alias || it.col != c.col {
			t.Errorf("%q: %+v %q", c.in, it, why)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestOrderKeysRaw(t *testing.T) {
	stmt := &gorm.Statement{Table: "orders"}
	keys, why := orderKeys(stmt, clause.OrderByColumn{Column: clause.Column{Name: `amount desc, orders.id, "Name" NULLS FIRST`, Raw: true}})
	if why != "" || len(keys) != 3 {
		t.Fatalf("%+v %q", keys, why)
	}
	if !keys[0].desc || !keys[0].nullsFirst || keys[0].name != "amount" {
		t.Errorf("key 0 %+v", keys[0])
	}
	if keys[1].desc || keys[1].name != "id" || keys[1].qual != "orders" {
		t.Errorf("key 1 %+v", keys[1])
	}
	if keys[2].name != "Name" || !keys[2].nullsFirst || keys[2].desc {
		t.Errorf("key 2 %+v", keys[2])
	}
	// An expression is a computed key (each shard computes it); a
	// position is refused.
	keys, why = orderKeys(stmt, clause.OrderByColumn{Column: clause.Column{Name: "lower(name) DESC NULLS LAST, amount % 7", Raw: true}})
	if why != "" || len(keys) != 2 || !keys[0].computed || keys[0].expr != "lower(name)" || !keys[0].desc || keys[0].nullsFirst ||
		!keys[1].computed || keys[1].expr != "amount % 7" || keys[1].desc {
		t.Errorf("expression keys %+v %q", keys, why)
	}
	if _, why := orderKeys(stmt, clause.OrderByColumn{Column: clause.Column{Name: "2", Raw: true}}); why == "" {
		t.Error("a position was accepted")
	}
}

func TestMergeValues(t *testing.T) {
	if v, _ := addValues(int64(2), int64(3)); v != int64(5) {
		t.Errorf("int add %v", v)
	}
	if v, _ := addValues("1.50", "2.125"); v != "3.625" {
		t.Errorf("numeric add %v", v)
	}
	if v, _ := addValues(nil, int64(3)); v != int64(3) {
		t.Errorf("null add %v", v)
	}
	if _, err := addValues(int64(1<<62), int64(1<<62)); err == nil {
		t.Error("overflow not reported")
	}
	// AVG from SUM and COUNT: (10 + 2) / (4 + 1), not (10/4 + 2/1) / 2.
	s, _ := addValues(int64(10), int64(2))
	n, _ := addValues(int64(4), int64(1))
	if v, _ := avgValue(s, n); v != "2.4000000000000000" {
		t.Errorf("avg %v", v)
	}
	if v, _ := avgValue(nil, int64(0)); v != nil {
		t.Errorf("avg of nothing %v", v)
	}
	cmp := &comparer{kinds: []valKind{kindNumeric, kindText}}
	if c, _ := cmp.cmp(0, "10", "9.5"); c != 1 {
		t.Error("numeric compared as text")
	}
	if _, err := cmp.cmp(1, "a", "B"); err == nil {
		t.Error("text compared without a known collation")
	}
	keys := []orderKey{{col: 0, desc: true, nullsFirst: true}}
	if c, _ := compareRows(keys, cmp, []any{nil}, []any{"1"}); c != -1 {
		t.Error("DESC: NULL not first")
	}
	keys[0].desc, keys[0].nullsFirst = false, false
	if c, _ := compareRows(keys, cmp, []any{nil}, []any{"1"}); c != 1 {
		t.Error("ASC: NULL not last")
	}
}

// Text as a MySQL driver returns it (bytes) is ordered only under a
// byte-order collation; grouped and counted distinct only under byte
// equality; an explicit COLLATE is not merged.
func TestTextCollation(t *testing.T) {
	cmp := &comparer{kinds: []valKind{kindText, kindUnordered}, coll: Collation{Equal: true, Why: "column x"}}
	if _, err := cmp.cmp(0, []byte("a"), []byte("B")); err == nil || !contains(err.Error(), "column x") {
		t.Errorf("text bytes ordered without byte order: %v", err)
	}
	if _, err := cmp.cmp(1, []byte("a"), []byte("b")); err == nil {
		t.Error("ENUM ordered by its bytes")
	}
	if err := cmp.equalText("DISTINCT", []int{0}); err != nil {
		t.Errorf("DISTINCT under byte equality: %v", err)
	}
	cmp.coll = Collation{Order: true, Equal: true}
	if c, err := cmp.cmp(0, []byte("a"), []byte("B")); err != nil || c != 1 {
		t.Errorf("byte order: %d %v", c, err)
	}
	cmp.coll = Collation{Why: "column y"}
	if err := cmp.equalText("GROUP BY", []int{1, 0}); err == nil || !contains(err.Error(), "column y") {
		t.Errorf("GROUP BY text without byte equality: %v", err)
	}
	set := map[string]struct{}{}
	if err := addDistinct(set, `[1, 2]`, cmp.coll); err != nil || len(set) != 2 {
		t.Errorf("count(DISTINCT) of numbers: %v %v", err, set)
	}
	if err := addDistinct(set, `["a"]`, cmp.coll); err == nil {
		t.Error("count(DISTINCT) of text without byte equality")
	}
	p := &Plan{items: []selItem{{text: "status"}}, order: []orderKey{{expr: `status COLLATE "C"`}}}
	if why := explicitCollate(p, nil); !contains(why, "COLLATE") {
		t.Errorf("explicit COLLATE: %q", why)
	}
	if why := explicitCollate(&Plan{items: []selItem{{text: "status"}}}, []clause.Expression{clause.Expr{SQL: "status = ? COLLATE utf8mb4_bin"}}); why == "" {
		t.Error("explicit COLLATE in HAVING")
	}
}

// PostgreSQL's char(n) (bpchar) arrives padded with spaces and is
// compared without them: "a" sorts before "a\t", "a" and "a " group
// together, and a HAVING literal matches without its padding.
func TestPaddedText(t *testing.T) {
	if k := kindOf("bpchar"); k != kindPadded {
		t.Fatalf("bpchar kind %d", k)
	}
	cmp := &comparer{kinds: []valKind{kindPadded}, coll: Collation{Order: true, Equal: true}}
	if c, err := cmp.cmp(0, "a   ", "a\t  "); err != nil || c != -1 {
		t.Errorf(`"a   " vs "a\t  ": %d %v`, c, err)
	}
	if c, err := cmp.cmp(0, []byte("a   "), []byte("a\t  ")); err != nil || c != -1 {
		t.Errorf(`bytes "a   " vs "a\t  ": %d %v`, c, err)
	}
	var a, b strings.Builder
	groupKey(&a, "a   ", kindPadded)
	groupKey(&b, "a", kindPadded)
	if a.String() != b.String() {
		t.Errorf("group keys %q and %q", a.String(), b.String())
	}
	if c, err := compareHaving("a   ", kindPadded, "a", kindText, true, cmp); err != nil || c != 0 {
		t.Errorf("HAVING label = 'a': %d %v", c, err)
	}
	cmp.coll = Collation{Equal: true, Why: "column z"}
	if _, err := cmp.cmp(0, "a", "b"); err == nil || !contains(err.Error(), "column z") {
		t.Errorf("char(n) ordered without byte order: %v", err)
	}
}
