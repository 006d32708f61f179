package integration_test

import (
	"fmt"
	"math/rand"
	"testing"

	"gorm.io/gorm"

	"github.com/freshread/freshread/sharding"
)

// TestShardingMergeDeepOffset pages with the two-phase deep OFFSET method
// (DeepOffset 1: used whenever offset >= 4 x limit) over random ORDER BYs
// with heavy ties and NULLs, ASC/DESC, NULLS FIRST/LAST, several columns,
// always ending with the primary key (a total order: the page is unique,
// so it must equal the single database's page row for row); then again
// with nearly every row on one shard.
func TestShardingMergeDeepOffset(t *testing.T) {
	e := newMergeEnv(t, func(c *sharding.Config) { c.DeepOffset = 1 })
	// NULL statuses on both sides (every 4th order).
	for _, db := range append([]*gorm.DB{e.ref}, e.directAll()...) {
		if err := db.Exec("UPDATE orders SET status = NULL WHERE id % 4 = 0").Error; err != nil {
			t.Fatal(err)
		}
	}
	// Written behind the plugins' backs: they read from a replica at once,
	// which must have replayed it (it had not once in CI, and a page
	// showed a status the update had cleared).
	e.waitCaughtUp()
	orders := []string{"amount", "amount desc", "id desc"}
	if e.textOK {
		orders = append(orders, "status", "status desc", "status nulls first", "status desc nulls last")
	}
	rnd := rand.New(rand.NewSource(17))
	run := func(label string) {
		total := 0
		e.ref.Model(&ShOrder{}).Select("count(*)").Scan(&total)
		for n := 0; n < 60; n++ {
			ob := orders[rnd.Intn(len(orders))]
			if rnd.Intn(2) == 0 {
				ob += ", " + orders[rnd.Intn(len(orders)-1)] // may repeat a column: still a valid ORDER BY
			}
			pk := "id"
			if rnd.Intn(2) == 0 {
				pk = "id desc"
			}
			l := 1 + rnd.Intn(12)
			o := 4*l + rnd.Intn(total+20)
			got := e.same(t, fmt.Sprintf("%s: order %s, %s limit %d offset %d", label, ob, pk, l, o), newOrders, func(db *gorm.DB, d any) error {
				return db.Order(ob + ", " + pk).Limit(l).Offset(o).Find(d).Error
			}).(*[]ShOrder)
			if want := max(0, min(l, total-o)); len(*got) != want {
				t.Fatalf("%s: limit %d offset %d: %d rows, want %d", label, l, o, len(*got), want)
			}
		}
	}
	run("spread")
	// Nearly every row on one shard: keep shard s0's rows and a few others.
	first := e.s.ShardOf(e.rows[0].UserID)
	var drop []int64
	for sh, rows := range e.perShrd {
		if sh == first {
			continue
		}
		for i, o := range rows {
			if i%10 != 0 {
				drop = append(drop, o.ID)
			}
		}
	}
	for _, db := range append([]*gorm.DB{e.ref}, e.directAll()...) {
		if err := db.Exec("DELETE FROM orders WHERE id IN ?", drop).Error; err != nil {
			t.Fatal(err)
		}
	}
	e.waitCaughtUp()
	run("skewed")
}

// directAll returns the plain connections to every shard's primary.
func (e *shEnv) directAll() []*gorm.DB {
	var out []*gorm.DB
	for _, d := range e.direct {
		out = append(out, d)
	}
	return out
}
