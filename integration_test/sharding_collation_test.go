package integration_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/freshread/freshread/sharding"
)

// TestShardingMergeColumnCollation: a merged read ordering a text column
// compares in byte order when the column's collation sorts in byte order.
// With the column declared COLLATE "en-x-icu" (the database's default
// being C), a merged Order("status").Limit and Distinct.Order sort by the
// ranks one shard gives the values under the column's collation, and match
// the database's own ICU order (they returned rows in C order once, and
// were refused after that), and so do min and max; ordering by an
// expression of the column, which the merge does not rank, is refused
// (ErrScatterUnsupported naming the column).
func TestShardingMergeColumnCollation(t *testing.T) {
	statuses := []string{"b", "B", "a", "A", "é", "e", "Z", "z"}
	seed := func(e *shEnv) {
		t.Helper()
		var orders []ShOrder
		for i, st := range statuses {
			// Users 300 apart: their buckets fall on every shard.
			orders = append(orders, ShOrder{ID: int64(9000 + i), UserID: int64(300*i + 1), Status: st})
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
	var icu []string // the database's own order
	if err := e.direct[e.names[0]].Raw(`SELECT v FROM unnest(?::text[]) AS u(v) ORDER BY v COLLATE "en-x-icu"`, "{"+strings.Join(statuses, ",")+"}").Scan(&icu).Error; err != nil {
		t.Fatal(err)
	}
	if slices.Equal(icu, want) {
		t.Fatalf("ICU order %q is byte order: the test cannot tell them apart", icu)
	}
	var rows []ShOrder
	if err := e.db.Order("status").Limit(3).Find(&rows).Error; err != nil {
		t.Fatalf("Order.Limit with status COLLATE en-x-icu: %v", err)
	}
	var first []string
	for _, r := range rows {
		first = append(first, r.Status)
	}
	if !slices.Equal(first, icu[:3]) {
		t.Fatalf("Order.Limit with status COLLATE en-x-icu: %q, want %q (the database's order)", first, icu[:3])
	}
	var distinct []string
	if err := e.db.Model(&ShOrder{}).Distinct("status").Order("status").Pluck("status", &distinct).Error; err != nil {
		t.Fatalf("Distinct.Order with status COLLATE en-x-icu: %v", err)
	}
	if !slices.Equal(distinct, icu) {
		t.Fatalf("Distinct.Order with status COLLATE en-x-icu: %q, want %q", distinct, icu)
	}
	var mm struct{ Lo, Hi string }
	if err := e.db.Model(&ShOrder{}).Select("min(status) AS lo, max(status) AS hi").Scan(&mm).Error; err != nil {
		t.Fatalf("min/max(status) with status COLLATE en-x-icu: %v", err)
	}
	if mm.Lo != icu[0] || mm.Hi != icu[len(icu)-1] {
		t.Fatalf("min/max(status) with status COLLATE en-x-icu: %+v, want %q and %q", mm, icu[0], icu[len(icu)-1])
	}
	// Ordering by an expression of the column is not ranked: refused.
	var upper []string
	err := e.db.Model(&ShOrder{}).Order("upper(status)").Limit(3).Pluck("status", &upper).Error
	if !errors.Is(err, sharding.ErrScatterUnsupported) || !strings.Contains(err.Error(), "status") {
		t.Fatalf("ORDER BY upper(status) with status COLLATE en-x-icu: %v (%q), want ErrScatterUnsupported naming the column", err, upper)
	}
}
