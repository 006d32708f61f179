package integration_test

import (
	"errors"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/freshread/freshread/sharding"
)

type havingRow struct {
	UserID int64
	N      int64
	Total  int64
}

// HAVING over groups spanning shards is evaluated on the merged groups:
// the same result as on one database.
func TestShardingMergeHaving(t *testing.T) {
	e := newMergeEnv(t)
	const sel = "user_id, count(*) AS n, sum(amount) AS total"
	rows := func() any { return &[]havingRow{} }
	for _, q := range []struct {
		what string
		f    func(*gorm.DB) *gorm.DB
	}{
		{"count > ?", func(db *gorm.DB) *gorm.DB { return db.Having("count(*) > ?", 3).Order("user_id") }},
		{"hidden max, AND", func(db *gorm.DB) *gorm.DB {
			return db.Having("sum(amount) >= ? AND max(amount) < 45", 100).Order("total desc, user_id")
		}},
		{"hidden avg and min, OR", func(db *gorm.DB) *gorm.DB {
			return db.Having("avg(amount) > 25 OR min(amount) = 0").Order("user_id desc")
		}},
		{"NOT, group column", func(db *gorm.DB) *gorm.DB {
			return db.Having("NOT (count(*) <= 2) AND user_id <> ?", 37*5).Order("user_id")
		}},
		{"two Having calls", func(db *gorm.DB) *gorm.DB {
			return db.Having("count(*) > 1").Having("sum(amount) < ?", 200).Order("n, user_id")
		}},
		{"IS NOT NULL, float parameter", func(db *gorm.DB) *gorm.DB {
			return db.Having("max(amount) IS NOT NULL AND sum(amount) > ?", 99.5).Order("user_id")
		}},
		{"limit, offset", func(db *gorm.DB) *gorm.DB {
			return db.Having("count(*) >= ?", 2).Order("total desc, user_id").Limit(5).Offset(2)
		}},
		{"nothing passes", func(db *gorm.DB) *gorm.DB { return db.Having("count(*) > 1000").Order("user_id") }},
		{"where and having", func(db *gorm.DB) *gorm.DB {
			return db.Where("amount > ?", 10).Having("count(*) >= 2 AND count(*) <> 3").Order("user_id")
		}},
	} {
		e.same(t, q.what, rows, func(db *gorm.DB, d any) error {
			return q.f(db.Model(&ShOrder{}).Select(sel).Group("user_id")).Scan(d).Error
		})
	}
	// Groups by a text column (equality needs no byte order), spanning
	// every shard.
	type statusRow struct {
		Status string
		N      int64
	}
	e.same(t, "status = ?", func() any { return &[]statusRow{} }, func(db *gorm.DB, d any) error {
		return db.Model(&ShOrder{}).Select("status, count(*) AS n").Group("status").Having("status = ? OR sum(amount) < ?", "paid", 0).Scan(d).Error
	})
	// Count of the groups that pass.
	var n, want int64
	if err := e.db.Model(&ShOrder{}).Group("user_id").Having("count(*) >= ?", 5).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	e.ref.Model(&ShOrder{}).Group("user_id").Having("count(*) >= ?", 5).Count(&want)
	if n != want || n == 0 {
		t.Fatalf("Count with HAVING %d, want %d", n, want)
	}
	// What the merge cannot evaluate is refused, naming it.
	for _, h := range []string{"sum(amount) % 2 = 0", "status LIKE 'p%'", "sum(amount) / count(*) > 3", "amount > 3", "string_agg(status, ',') = 'x'"} {
		var x []map[string]any
		err := e.db.Model(&ShOrder{}).Select("user_id, count(*) AS n").Group("user_id").Having(h).Find(&x).Error
		if !errors.Is(err, sharding.ErrScatterUnsupported) || !strings.Contains(err.Error(), "HAVING") {
			t.Fatalf("HAVING %s: err = %v, want ErrScatterUnsupported naming HAVING", h, err)
		}
	}
}
