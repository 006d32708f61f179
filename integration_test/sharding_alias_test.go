package integration_test

import (
	"errors"
	"testing"

	"github.com/freshread/freshread/sharding"
)

// TestShardingTableAlias: db.Table("orders o") (GORM names the statement
// by its alias) is routed as orders: by user to one shard, and merged
// over every shard without a key. A table expression that joins the
// sharded table is refused before it runs, not answered from one
// database.
func TestShardingTableAlias(t *testing.T) {
	e := newShEnv(t, withIDs(fixedIDs(t, 1)))
	users := spread // on every shard
	for _, u := range users {
		if err := e.db.Create(&[]ShOrder{{UserID: u, Status: "alias"}, {UserID: u, Status: "alias"}}).Error; err != nil {
			t.Fatal(err)
		}
	}
	if shards := e.statusOn("alias"); len(shards) < 2 {
		t.Fatalf("orders on %v: the test needs several shards", shards)
	}
	for _, table := range []string{"orders o", "orders AS o", `"orders"`, "public.orders"} {
		var mine []ShOrder
		if err := e.db.Table(table).Where("user_id = ?", 300).Find(&mine).Error; err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		if len(mine) != 2 || mine[0].UserID != 300 {
			t.Fatalf("db.Table(%q) by user 300: %+v, want its 2 orders", table, mine)
		}
		var n int64
		if err := e.db.Table(table).Where("status = ?", "alias").Count(&n).Error; err != nil {
			t.Fatalf("%s: count: %v", table, err)
		}
		if n != int64(2*len(users)) {
			t.Fatalf("db.Table(%q) count over every shard = %d, want %d", table, n, 2*len(users))
		}
	}
	var rows []map[string]any
	err := e.db.Table("orders o JOIN order_items i ON i.order_id = o.id").Where("o.user_id = ?", 3).Find(&rows).Error
	if !errors.Is(err, sharding.ErrUnsupportedStatement) {
		t.Fatalf("a join written in db.Table: %v, want ErrUnsupportedStatement", err)
	}
}
