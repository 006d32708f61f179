package sharding

import (
	"testing"

	"gorm.io/gorm/clause"
)

func testMatcher() columnMatcher {
	t := &tableInfo{name: "orders", key: "user_id", id: "id"}
	return t.matcher(true)
}

// mod4 routes key k to shard k%4; IDs resolve to shard id%4.
func evalMod4(c *cond) (uint64, bool) {
	s := &Sharding{cfg: Config{Algorithm: Mod(4)}}
	pl := placer{rt: &routing{shards: 4, bucketShard: []uint8{0, 1, 2, 3}, owning: 0xf}}
	ids := map[int64]int{}
	for _, id := range collectIDs(c, nil) {
		ids[id] = int(id % 4)
	}
	return s.eval(pl, c, ids)
}

func TestConditionText(t *testing.T) {
	cases := []struct {
		sql     string
		vars    []any
		mask    uint64
		bounded bool
	}{
		{"user_id = ?", []any{5}, 1 << 1, true},
		{`"orders"."user_id" = ?`, []any{6}, 1 << 2, true},
		{"? = user_id", []any{7}, 1 << 3, true},
		{"user_id IN ?", []any{[]int64{1, 2}}, 0b110, true},
		{"user_id IN (?)", []any{[]int{1, 2}}, 0b110, true},
		{"user_id IN (1, 3)", nil, 0b1010, true},
		{"status = ? AND user_id = ?", []any{"x", 2}, 0b100, true},
		{"status = ? OR user_id = ?", []any{"x", 2}, 0, false},
		{"user_id = ? OR user_id = ?", []any{1, 2}, 0b110, true},
		{"(user_id = ? OR user_id = ?) AND status = ?", []any{1, 2, "x"}, 0b110, true},
		{"user_id = ? AND user_id = ?", []any{1, 2}, 0, true},
		{"NOT user_id = ?", []any{1}, 0, false},
		{"user_id > ?", []any{1}, 0, false},
		{"amount BETWEEN ? AND ? AND user_id = ?", []any{1, 9, 3}, 0b1000, true},
		{"user_id IN (SELECT user_id FROM x WHERE a = 1 AND user_id = ?)", []any{1}, 0, false},
		{"(SELECT 1 FROM x WHERE user_id = ?) = 1", []any{1}, 0, false},
		{"other.user_id = ?", []any{1}, 0, false},
		{"id = ?", []any{6}, 0b100, true},
		{"user_id = ? OR (status = 'a' AND user_id = ?)", []any{1, 2}, 0b110, true},
		{"status = 'it''s' AND user_id = ?", []any{3}, 0b1000, true},
	}
	for _, c := range cases {
		got := parseText(c.sql, c.vars, testMatcher())
		m, b := evalMod4(got)
		if b != c.bounded || (b && m != c.mask) {
			t.Errorf("%s %v: mask %b bounded %v, want %b %v", c.sql, c.vars, m, b, c.mask, c.bounded)
		}
	}
}

func TestConditionRawWhere(t *testing.T) {
	cases := []struct {
		sql     string
		vars    []any
		mask    uint64
		bounded bool
	}{
		{"SELECT * FROM orders WHERE user_id = $1 ORDER BY id", []any{2}, 0b100, true},
		{"UPDATE orders SET status = $1 WHERE user_id = $2", []any{"x", 3}, 0b1000, true},
		{"UPDATE orders SET status = 'x'", nil, 0, false},
		{"DELETE FROM orders WHERE id IN ($1, $2)", []any{1, 2}, 0b110, true},
		{"SELECT * FROM orders WHERE user_id = 1; DELETE FROM orders", nil, 0, false},
		{"SELECT * FROM orders WHERE status = $1 OR user_id = $2", []any{"x", 1}, 0, false},
		// An INSERT's WHERE is its conflict clause's or its source query's:
		// it pins neither the inserted row nor the updated one.
		{"INSERT INTO orders (id, user_id) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET status = 'x' WHERE orders.user_id = $3", []any{9, 1, 2}, 0, false},
		{"INSERT INTO orders (id, user_id) SELECT id + 1, 3 FROM orders WHERE user_id = 1", nil, 0, false},
		{"REPLACE INTO orders (id, user_id) SELECT 1, 3 FROM dual WHERE 1 = 1 AND user_id = 1", nil, 0, false},
	}
	for _, c := range cases {
		got := rawWhere(c.sql, c.vars, testMatcher())
		m, b := evalMod4(got)
		if b != c.bounded || (b && m != c.mask) {
			t.Errorf("%s %v: mask %b bounded %v, want %b %v", c.sql, c.vars, m, b, c.mask, c.bounded)
		}
	}
}

func TestConditionClauses(t *testing.T) {
	m := testMatcher()
	cases := []struct {
		name    string
		w       clause.Where
		mask    uint64
		bounded bool
	}{
		{"eq", clause.Where{Exprs: []clause.Expression{clause.Eq{Column: "user_id", Value: 1}}}, 0b10, true},
		{"eq slice", clause.Where{Exprs: []clause.Expression{clause.Eq{Column: clause.Column{Table: clause.CurrentTable, Name: "user_id"}, Value: []int{1, 2}}}}, 0b110, true},
		{"pk in", clause.Where{Exprs: []clause.Expression{clause.IN{Column: clause.PrimaryColumn, Values: []any{5}}}}, 0b10, true},
		{"and", clause.Where{Exprs: []clause.Expression{clause.Eq{Column: "status", Value: "x"}, clause.Eq{Column: "user_id", Value: 3}}}, 0b1000, true},
		{"or single", clause.Where{Exprs: []clause.Expression{clause.Eq{Column: "user_id", Value: 1}, clause.OrConditions{Exprs: []clause.Expression{clause.Eq{Column: "user_id", Value: 2}}}}}, 0b110, true},
		{"or unbounded", clause.Where{Exprs: []clause.Expression{clause.Eq{Column: "user_id", Value: 1}, clause.OrConditions{Exprs: []clause.Expression{clause.Eq{Column: "status", Value: "x"}}}}}, 0, false},
		{"a and b or c", clause.Where{Exprs: []clause.Expression{
			clause.Eq{Column: "status", Value: "x"}, clause.Eq{Column: "user_id", Value: 1},
			clause.OrConditions{Exprs: []clause.Expression{clause.Eq{Column: "user_id", Value: 2}}}}}, 0b110, true},
		{"not", clause.Where{Exprs: []clause.Expression{clause.NotConditions{Exprs: []clause.Expression{clause.Eq{Column: "user_id", Value: 1}}}}}, 0, false},
		{"subquery var", clause.Where{Exprs: []clause.Expression{clause.Expr{SQL: "user_id IN (?)", Vars: []any{clause.Expr{SQL: "SELECT 1"}}}}}, 0, false},
	}
	for _, c := range cases {
		got := exprCond(c.w, m)
		mask, b := evalMod4(got)
		if b != c.bounded || (b && mask != c.mask) {
			t.Errorf("%s: mask %b bounded %v, want %b %v", c.name, mask, b, c.mask, c.bounded)
		}
	}
}

func TestAlgorithm(t *testing.T) {
	a := EvenBuckets(1024, "a", "b", "c", "d")
	tab, err := a.bind([]string{"a", "b", "c", "d"})
	if err != nil {
		t.Fatal(err)
	}
	if tab[0] != 0 || tab[255] != 0 || tab[256] != 1 || tab[1023] != 3 {
		t.Fatalf("ranges: %v %v %v %v", tab[0], tab[255], tab[256], tab[1023])
	}
	if a.Bucket(1025) != 1 {
		t.Fatal("bucket")
	}
	if _, err := VirtualBuckets(8, BucketRange{0, 3, "a"}).bind([]string{"a"}); err == nil {
		t.Fatal("uncovered buckets accepted")
	}
	if _, err := VirtualBuckets(8, BucketRange{0, 7, "a"}, BucketRange{7, 7, "a"}).bind([]string{"a"}); err == nil {
		t.Fatal("overlap accepted")
	}
	if _, err := Mod(3).bind([]string{"a", "b"}); err == nil {
		t.Fatal("Mod(3) with 2 shards accepted")
	}
}
