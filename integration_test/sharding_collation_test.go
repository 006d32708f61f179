package integration_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/freshread/freshread/sharding"
)

// TestShardingMergeColumnCollation: a merged read ordering or comparing a
// text column compares in byte order, which is each shard's order only
// when the column's collation sorts in byte order. With the column
// declared COLLATE "en-x-icu" (the database's default being C), a merged
// Order("status").Limit and Distinct.Order are refused
// (ErrScatterUnsupported naming the column), where they returned rows in
// C order before; with the column back to "C" they merge, and match one
// database holding every row, sorted by the database itself.
func TestShardingMergeColumnCollation(t *testing.T) {
	statuses := []string{"b", "B", "a", "A", "é", "e", "Z", "z"}
	seed := func(e *shEnv) {
		t.Helper()
		var orders []ShOrder
		for i, st := range statuses {
			orders = append(orders, ShOrder{ID: int64(9000 + i), UserID: int64(i + 1), Status: st})
		}
		if err := e.db.Create(&orders).Error; err != nil {
			t.Fatal(err)
		}
	}

	// The column in the database's default collation (C here): merged
	// in byte order, as PostgreSQL's "C" sorts.
	c := newShEnv(t)
	seed(c)
	var got []string
	if err := c.db.Model(&ShOrder{}).Order("status").Pluck("status", &got).Error; err != nil {
		t.Fatalf("merged Order with status in C: %v", err)
	}
	want := slices.Clone(statuses)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("merged order %q, want byte order %q", got, want)
	}

	// The column declared COLLATE "en-x-icu": refused. Altered before
	// any statement of this test reads the table: a statement pgx
	// prepared before the ALTER fails with "cached plan must not change
	// result type" (SQLSTATE 0A000), a server error unrelated to the merge.
	e := newShEnv(t)
	for _, name := range e.names {
		if err := e.direct[name].Exec(`ALTER TABLE orders ALTER COLUMN status TYPE text COLLATE "en-x-icu"`).Error; err != nil {
			t.Fatalf("shard %s: %v", name, err)
		}
	}
	seed(e)
	merged := map[string]func() error{
		"Order.Limit": func() error {
			var got []ShOrder
			return e.db.Order("status").Limit(3).Find(&got).Error
		},
		"Distinct.Order": func() error {
			var got []string
			return e.db.Model(&ShOrder{}).Distinct("status").Order("status").Pluck("status", &got).Error
		},
	}
	for what, f := range merged {
		if err := f(); !errors.Is(err, sharding.ErrScatterUnsupported) || !strings.Contains(err.Error(), "status") {
			t.Fatalf("%s with status COLLATE en-x-icu: %v, want ErrScatterUnsupported naming the column", what, err)
		}
	}
}
