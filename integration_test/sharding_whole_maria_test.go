package integration_test

import (
	"errors"
	"reflect"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/sharding"
)

// TestMariaDBShardingWhole: statements of several parts on two MariaDB
// shards (users 1 and 2 on m0, user 600 on m1): those pinned to one shard
// answer what a reference database holding every row answers; the others
// are refused before either shard runs anything, and no row changes.
func TestMariaDBShardingWhole(t *testing.T) {
	m := testcluster.MariaDBFor(t)
	open := func() *gorm.DB {
		db, err := gorm.Open(mysql.Open(m.PrimaryDSN(m.CreateDatabase(t))), quiet())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeDB(db) })
		if err := db.AutoMigrate(&ShOrder{}, &ShItem{}); err != nil {
			t.Fatal(err)
		}
		return db
	}
	ref, def := open(), open()
	direct := map[string]*gorm.DB{"m0": open(), "m1": open()}
	s := sharding.New(sharding.Config{
		Tables:    []sharding.Table{{Name: "orders", Key: "user_id", ID: "id"}, {Name: "order_items", Key: "user_id"}},
		Shards:    []sharding.ShardConfig{{Name: "m0", DB: direct["m0"]}, {Name: "m1", DB: direct["m1"]}},
		Algorithm: sharding.EvenBuckets(1024, "m0", "m1"),
		IDs:       fixedIDs(t, 13),
	})
	if err := def.Use(s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const a, a2, b = 1, 2, 600
	if s.ShardOf(a) != "m0" || s.ShardOf(a2) != "m0" || s.ShardOf(b) != "m1" {
		t.Fatalf("users on %s, %s, %s", s.ShardOf(a), s.ShardOf(a2), s.ShardOf(b))
	}
	var items []ShItem
	for _, u := range []int64{a, a2, b} {
		for j := 0; j < 3; j++ {
			o := ShOrder{UserID: u, Status: []string{"new", "paid"}[j%2], Amount: int(u)%7 + j}
			if err := def.Create(&o).Error; err != nil {
				t.Fatal(err)
			}
			if err := ref.Create(&o).Error; err != nil {
				t.Fatal(err)
			}
			items = append(items, ShItem{ID: int64(100 + len(items)), OrderID: o.ID, UserID: u, Sku: []string{"x", "y"}[j%2]})
		}
	}
	if err := def.Create(&items).Error; err != nil {
		t.Fatal(err)
	}
	if err := ref.Create(&items).Error; err != nil {
		t.Fatal(err)
	}

	for _, sh := range []struct {
		name string
		q    func(db *gorm.DB) (any, error)
	}{
		{"union all, two users of one shard", rawRows[ShOrder]("SELECT * FROM orders WHERE user_id = ? UNION ALL SELECT * FROM orders WHERE user_id = ? ORDER BY id", a, a2)},
		{"cte", rawRows[ShOrder]("WITH x AS (SELECT * FROM orders WHERE user_id = ?) SELECT * FROM x WHERE status = 'new' ORDER BY id", b)},
		{"join on the key", rawRows[orderSku]("SELECT o.id, i.sku FROM orders o JOIN order_items i ON i.user_id = o.user_id AND i.order_id = o.id WHERE o.user_id = ? ORDER BY o.id", b)},
		{"subquery", rawRows[ShOrder]("SELECT * FROM orders WHERE user_id = ? AND id IN (SELECT order_id FROM order_items WHERE user_id = ? AND sku = 'x') ORDER BY id", a, a)},
		{"gorm joins", func(db *gorm.DB) (any, error) {
			var out []orderSku
			err := db.Table("orders").Select("orders.id, i.sku").Joins("JOIN order_items i ON i.user_id = orders.user_id AND i.order_id = orders.id").
				Where("orders.user_id = ?", a2).Order("orders.id").Scan(&out).Error
			return &out, err
		}},
	} {
		sameAnswer(t, sh.name, def, ref, sh.q)
	}
	for _, sh := range unionAllShapes(a, b) {
		sameAnswer(t, sh.name, def, ref, sh.q)
	}
	// A multi-table UPDATE of one user's rows changes what the reference changes.
	const upd = "UPDATE orders o JOIN order_items i ON i.user_id = o.user_id AND i.order_id = o.id SET o.amount = o.amount + 100 WHERE o.user_id = ? AND i.sku = 'x'"
	for _, db := range []*gorm.DB{def, ref} {
		if err := db.Exec(upd, b).Error; err != nil {
			t.Fatal(err)
		}
	}
	sameAnswer(t, "after a multi-table update", def, ref, rawRows[ShOrder]("SELECT * FROM orders WHERE user_id = ? ORDER BY id", b))

	every := func() map[string][]ShOrder {
		out := map[string][]ShOrder{}
		for name, d := range direct {
			var rows []ShOrder
			if err := d.Order("id").Find(&rows).Error; err != nil {
				t.Fatal(err)
			}
			out[name] = rows
		}
		return out
	}
	before := every()
	for _, c := range []struct {
		name string
		want error
		run  func() error
	}{
		{"union all over two shards, ordered", sharding.ErrCrossShard, func() error {
			var x []ShOrder
			return def.Raw("SELECT * FROM orders WHERE user_id = ? UNION ALL SELECT * FROM orders WHERE user_id = ? ORDER BY id", a, b).Scan(&x).Error
		}},
		{"multi-table update over two shards", sharding.ErrCrossShard, func() error {
			return def.Exec("UPDATE orders o JOIN orders p ON p.status = o.status SET o.amount = 0, p.amount = 0 WHERE o.user_id = ? AND p.user_id = ?", a, b).Error
		}},
		{"gorm where subquery on another shard", sharding.ErrCrossShard, func() error {
			return def.Model(&ShOrder{}).Where("user_id = ? AND id IN (?)", a, def.Table("order_items").Select("order_id").Where("user_id = ?", b)).Update("status", "zz").Error
		}},
		{"join not on the key", sharding.ErrUnsupportedStatement, func() error {
			var x []orderSku
			return def.Raw("SELECT o.id, i.sku FROM orders o JOIN order_items i ON i.order_id = o.id WHERE o.user_id = ?", a).Scan(&x).Error
		}},
	} {
		if err := c.run(); !errors.Is(err, c.want) {
			t.Fatalf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if after := every(); !reflect.DeepEqual(after, before) {
		t.Fatalf("refused statements changed rows:\n before %s\n after  %s", short(&before), short(&after))
	}
}
