package integration_test

import (
	"testing"

	"gorm.io/gorm"
)

// count(DISTINCT col) is exact across shards: values repeated on several
// shards (status, amount) are counted once, with and without GROUP BY, in
// HAVING, and through Distinct("col").Count.
func TestShardingMergeCountDistinct(t *testing.T) {
	e := newMergeEnv(t)
	for _, col := range []string{"status", "amount", "user_id", "id"} {
		var got, want int64
		if err := e.db.Model(&ShOrder{}).Distinct(col).Count(&got).Error; err != nil {
			t.Fatalf("Distinct(%s).Count: %v", col, err)
		}
		if err := e.ref.Model(&ShOrder{}).Distinct(col).Count(&want).Error; err != nil {
			t.Fatal(err)
		}
		if got != want || got == 0 {
			t.Fatalf("Distinct(%s).Count = %d, want %d", col, got, want)
		}
	}
	// The sum of the shards' distinct counts is not the answer.
	perShard := 0
	for _, rows := range e.perShrd {
		seen := map[int]bool{}
		for _, o := range rows {
			seen[o.Amount] = true
		}
		perShard += len(seen)
	}
	var amounts int64
	e.ref.Model(&ShOrder{}).Distinct("amount").Count(&amounts)
	if int64(perShard) == amounts {
		t.Fatal("test data: no amount on several shards")
	}
	type row struct {
		Status string
		D      int64
		U      int64
		N      int64
	}
	for _, q := range []struct {
		what string
		f    func(*gorm.DB) *gorm.DB
	}{
		{"no group", func(db *gorm.DB) *gorm.DB {
			return db.Select("count(DISTINCT amount) AS d, count(distinct user_id) AS u, count(*) AS n")
		}},
		{"no rows", func(db *gorm.DB) *gorm.DB {
			return db.Select("count(DISTINCT amount) AS d, count(*) AS n").Where("amount < 0")
		}},
		{"group by status", func(db *gorm.DB) *gorm.DB {
			return db.Select("status, count(DISTINCT amount) AS d, count(DISTINCT user_id) AS u").Group("status").Order("d desc, u")
		}},
		{"having count distinct", func(db *gorm.DB) *gorm.DB {
			return db.Select("status, count(*) AS n").Group("status").Having("count(DISTINCT amount) > ?", 20).Order("n")
		}},
		{"distinct of an expression", func(db *gorm.DB) *gorm.DB {
			return db.Select("count(DISTINCT amount % 7) AS d, count(DISTINCT (user_id / 100)) AS u")
		}},
	} {
		e.same(t, q.what, func() any { return &[]row{} }, func(db *gorm.DB, d any) error {
			return q.f(db.Model(&ShOrder{})).Scan(d).Error
		})
	}
}
