package integration_test

import (
	"errors"
	"reflect"
	"sort"
	"strconv"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/sharding"
)

// wholeEnv is four shards and a reference database holding the same
// orders and items in one place; users a and a2 live on one shard, b on
// another.
type wholeEnv struct {
	*shEnv
	ref      *gorm.DB
	a, a2, b int64
	orders   []ShOrder
}

// orderSku is a row of a join of orders and their items.
type orderSku struct {
	ID  int64
	Sku string
}

func newWholeEnv(t *testing.T) *wholeEnv {
	t.Helper()
	e := &wholeEnv{shEnv: newShEnv(t, withIDs(fixedIDs(t, 12)))}
	e.a = 1
	for u := int64(2); e.a2 == 0 || e.b == 0; u++ {
		switch {
		case e.s.ShardOf(u) == e.s.ShardOf(e.a) && e.a2 == 0:
			e.a2 = u
		case e.s.ShardOf(u) != e.s.ShardOf(e.a) && e.b == 0:
			e.b = u
		}
	}
	var orders []ShOrder
	var items []ShItem
	for k, u := range []int64{e.a, e.a2, e.b, e.b + 1} {
		for j := 0; j < 3; j++ {
			o := ShOrder{UserID: u, Status: []string{"new", "paid"}[j%2], Amount: 10*k + j}
			if err := e.db.Create(&o).Error; err != nil {
				t.Fatal(err)
			}
			orders = append(orders, o)
			for s := 0; s < 2; s++ {
				items = append(items, ShItem{ID: int64(1000 + len(items)), OrderID: o.ID, UserID: u, Sku: []string{"x", "y"}[(j+s)%2]})
			}
		}
	}
	if err := e.db.Create(&items).Error; err != nil {
		t.Fatal(err)
	}
	ref, err := gorm.Open(postgres.Open(e.pg.PrimaryDSN(e.pg.CreateDatabase(t))), quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDB(ref) })
	if err := ref.AutoMigrate(&ShOrder{}, &ShItem{}, &ShProduct{}); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{ref.Create(&orders).Error, ref.Create(&items).Error, ref.Create(&ShProduct{ID: 1, Name: "widget"}).Error} {
		if err != nil {
			t.Fatal(err)
		}
	}
	e.ref, e.orders = ref, orders
	return e
}

// same runs q on the sharded database and on the reference and compares
// the answers (sorted when sorted is set: a scatter read's raw SQL has no
// ORDER BY).
func (e *wholeEnv) same(t *testing.T, what string, q func(db *gorm.DB) (any, error)) {
	t.Helper()
	sameAnswer(t, what, e.db, e.ref, q)
}

// sameAnswer runs q on the sharded database db and on the reference ref
// and compares the answers.
func sameAnswer(t *testing.T, what string, db, ref *gorm.DB, q func(db *gorm.DB) (any, error)) {
	t.Helper()
	got, err := q(db)
	if err != nil {
		t.Fatalf("%s: sharded: %v", what, err)
	}
	want, err := q(ref)
	if err != nil {
		t.Fatalf("%s: reference: %v", what, err)
	}
	if reflect.ValueOf(want).Elem().Len() == 0 {
		t.Fatalf("%s: the reference answers no row; the shape tests nothing", what)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n sharded   %s\n reference %s", what, short(got), short(want))
	}
}

// everyShard is every order on every shard, for "nothing changed".
func (e *wholeEnv) everyShard(t *testing.T) map[string][]ShOrder {
	t.Helper()
	out := map[string][]ShOrder{}
	for _, name := range shardNames {
		var rows []ShOrder
		if err := e.direct[name].Order("id").Find(&rows).Error; err != nil {
			t.Fatal(err)
		}
		out[name] = rows
	}
	return out
}

// sortedRows is rawRows for a statement without ORDER BY: its rows
// sorted by sortKey (the shards' answers come concatenated in shard order,
// the reference's in any).
func sortedRows[T any](sortKey func(T) int64, sql string, args ...any) func(db *gorm.DB) (any, error) {
	return func(db *gorm.DB) (any, error) {
		var out []T
		err := db.Raw(sql, args...).Scan(&out).Error
		sort.SliceStable(out, func(i, j int) bool { return sortKey(out[i]) < sortKey(out[j]) })
		return &out, err
	}
}

func orderID(o ShOrder) int64     { return o.ID }
func orderSkuID(o orderSku) int64 { return o.ID*10 + int64(len(o.Sku)) }

// unionAllShapes are UNION ALL statements whose parts pin different
// shards and that run whole on each, the answers concatenated.
func unionAllShapes(a, b int64) []struct {
	name string
	q    func(db *gorm.DB) (any, error)
} {
	return []struct {
		name string
		q    func(db *gorm.DB) (any, error)
	}{
		{"union all over two shards", sortedRows(orderID, "SELECT * FROM orders WHERE user_id = ? UNION ALL SELECT * FROM orders WHERE user_id = ?", a, b)},
		{"union all, parenthesized", sortedRows(orderID, "(SELECT * FROM orders WHERE user_id = ? AND status = 'new') UNION ALL (SELECT * FROM orders WHERE user_id = ?)", a, b)},
		{"union all, an IN over two shards and one user again", sortedRows(orderID, "SELECT * FROM orders WHERE user_id IN (?, ?) UNION ALL SELECT * FROM orders WHERE user_id = ?", a, b, b)},
		{"union all of joins on the key", sortedRows(orderSkuID, "SELECT o.id, i.sku FROM orders o JOIN order_items i ON i.user_id = o.user_id AND i.order_id = o.id WHERE o.user_id = ? UNION ALL SELECT o.id, i.sku FROM orders o JOIN order_items i ON i.user_id = o.user_id AND i.order_id = o.id WHERE o.user_id = ?", a, b)},
	}
}

// TestShardingUnionAllConcatenated: a UNION ALL whose parts pin different
// shards answers what one database holding every row answers: the
// statement runs whole on each shard its parts pin, and the answers are
// concatenated.
func TestShardingUnionAllConcatenated(t *testing.T) {
	e := newWholeEnv(t)
	for _, sh := range unionAllShapes(e.a, e.b) {
		e.resetCounts()
		e.same(t, sh.name, sh.q)
		if c := e.countsSnapshot(); len(c) != 2 || c[e.s.ShardOf(e.a)] != 1 || c[e.s.ShardOf(e.b)] != 1 {
			t.Fatalf("%s: statements per shard %v, want one on each of %s and %s", sh.name, c, e.s.ShardOf(e.a), e.s.ShardOf(e.b))
		}
	}
}

func rawRows[T any](sql string, args ...any) func(db *gorm.DB) (any, error) {
	return func(db *gorm.DB) (any, error) {
		var out []T
		err := db.Raw(sql, args...).Scan(&out).Error
		return &out, err
	}
}

// Statements the router must see whole: each shape whose sharded parts
// all pin one shard runs there and answers what one database holding
// every row answers; a co-located join without a key is scattered and
// concatenated.
func TestShardingWholeRouted(t *testing.T) {
	e := newWholeEnv(t)
	a, a2 := e.a, e.a2
	shapes := []struct {
		name string
		q    func(db *gorm.DB) (any, error)
	}{
		{"union all, one user", rawRows[ShOrder]("SELECT * FROM orders WHERE user_id = $1 AND status = 'new' UNION ALL SELECT * FROM orders WHERE user_id = $1 AND status = 'paid' ORDER BY id", a)},
		{"union, two users of one shard", rawRows[ShOrder]("SELECT * FROM orders WHERE user_id = ? UNION SELECT * FROM orders WHERE user_id = ? ORDER BY id", a, a2)},
		{"intersect", rawRows[ShOrder]("SELECT * FROM orders WHERE user_id = ? INTERSECT SELECT * FROM orders WHERE user_id = ? AND status = 'new' ORDER BY 1", a, a)},
		{"except", rawRows[ShOrder]("(SELECT * FROM orders WHERE user_id IN (?, ?)) EXCEPT (SELECT * FROM orders WHERE user_id = ?) ORDER BY 1", a, a2, a2)},
		{"cte read", rawRows[ShOrder]("WITH x AS (SELECT * FROM orders WHERE user_id = ?) SELECT * FROM x UNION ALL SELECT * FROM orders WHERE user_id = ? ORDER BY id", a, a2)},
		{"recursive cte", rawRows[ShOrder]("WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n WHERE k < 2) SELECT o.* FROM orders o JOIN n ON o.amount % 2 = n.k - 1 WHERE o.user_id = ? ORDER BY o.id", a)},
		{"join on the key, one user", rawRows[orderSku]("SELECT o.id, i.sku FROM orders o JOIN order_items i ON i.user_id = o.user_id AND i.order_id = o.id WHERE o.user_id = ? ORDER BY o.id, i.sku", a)},
		{"left join using the key", rawRows[orderSku]("SELECT o.id, i.sku FROM orders o LEFT JOIN order_items i USING (user_id) WHERE o.user_id = ? AND i.order_id = o.id ORDER BY 1, 2", a)},
		{"join by order ID", rawRows[orderSku]("SELECT o.id, i.sku FROM orders o JOIN order_items i ON i.user_id = o.user_id AND i.order_id = o.id WHERE o.id = ? ORDER BY 1, 2", e.orders[1].ID)},
		{"two users of one shard joined", rawRows[orderSku]("SELECT x.id, y.status AS sku FROM orders x JOIN orders y ON x.amount % 10 = y.amount % 10 WHERE x.user_id = ? AND y.user_id = ? ORDER BY 1, 2", a, a2)},
		{"subquery", rawRows[ShOrder]("SELECT * FROM orders WHERE user_id = ? AND id IN (SELECT order_id FROM order_items WHERE user_id = ? AND sku = 'x') ORDER BY id", a, a)},
		{"correlated subquery", rawRows[ShOrder]("SELECT * FROM orders o WHERE o.user_id = ? AND EXISTS (SELECT 1 FROM order_items i WHERE i.user_id = o.user_id AND i.order_id = o.id AND i.sku = 'y') ORDER BY id", a2)},
		{"derived table", rawRows[ShOrder]("SELECT * FROM (SELECT * FROM orders WHERE user_id = ?) AS t WHERE t.amount > 0 ORDER BY id", a)},
		{"alias", rawRows[ShOrder]("SELECT * FROM orders o WHERE o.user_id = ? ORDER BY o.id", a2)},
		{"gorm joins", func(db *gorm.DB) (any, error) {
			var out []orderSku
			err := db.Table("orders").Select("orders.id, i.sku").
				Joins("JOIN order_items i ON i.user_id = orders.user_id AND i.order_id = orders.id").
				Where("orders.user_id = ?", a).Order("orders.id, i.sku").Scan(&out).Error
			return &out, err
		}},
		{"gorm where subquery", func(db *gorm.DB) (any, error) {
			var out []ShOrder
			sub := db.Table("order_items").Select("order_id").Where("user_id = ? AND sku = ?", a, "y")
			err := db.Where("user_id = ? AND id IN (?)", a, sub).Order("id").Find(&out).Error
			return &out, err
		}},
		{"co-located join without a key", func(db *gorm.DB) (any, error) {
			var out []orderSku
			err := db.Raw("SELECT o.id, i.sku FROM orders o JOIN order_items i ON i.user_id = o.user_id AND i.order_id = o.id WHERE i.sku = 'x'").Scan(&out).Error
			sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
			return &out, err
		}},
	}
	for _, sh := range shapes {
		e.resetCounts()
		e.same(t, sh.name, sh.q)
		if sh.name != "co-located join without a key" {
			if c := e.countsSnapshot(); len(c) != 1 || c[e.s.ShardOf(a)] != 1 {
				t.Fatalf("%s: statements per shard %v, want one on %s", sh.name, c, e.s.ShardOf(a))
			}
		}
	}

	// A data-modifying CTE over two users of one shard changes the rows the
	// reference changes.
	const upd = "WITH u AS (UPDATE orders SET amount = amount + 100 WHERE user_id = ? RETURNING id) UPDATE orders SET amount = amount + 1000 WHERE user_id = ?"
	for _, db := range []*gorm.DB{e.db, e.ref} {
		if err := db.Exec(upd, a, a2).Error; err != nil {
			t.Fatal(err)
		}
	}
	e.same(t, "after a data-modifying CTE", rawRows[ShOrder]("SELECT * FROM orders WHERE user_id IN (?, ?) ORDER BY id", a, a2))
}

// A statement whose parts pin different shards, or one part no shard,
// or that reads a table of the default database with a sharded one, is
// refused before any shard runs anything, and no row changes.
func TestShardingWholeRefused(t *testing.T) {
	e := newWholeEnv(t)
	a, b := e.a, e.b
	other := func(db *gorm.DB, user int64) *gorm.DB {
		return db.Table("order_items").Select("order_id").Where("user_id = ?", user)
	}
	cases := []struct {
		name string
		want error
		run  func() error
	}{
		{"union all over two shards, ordered", sharding.ErrCrossShard, func() error {
			var x []ShOrder
			return e.db.Raw("SELECT * FROM orders WHERE user_id = ? UNION ALL SELECT * FROM orders WHERE user_id = ? ORDER BY id", a, b).Scan(&x).Error
		}},
		{"union all over two shards, counted", sharding.ErrCrossShard, func() error {
			var x []int64
			return e.db.Raw("SELECT count(*) FROM orders WHERE user_id = ? UNION ALL SELECT count(*) FROM orders WHERE user_id = ?", a, b).Scan(&x).Error
		}},
		{"union over two shards", sharding.ErrCrossShard, func() error {
			var x []string
			return e.db.Raw("SELECT status FROM orders WHERE user_id = ? UNION SELECT status FROM orders WHERE user_id = ?", a, b).Scan(&x).Error
		}},
		{"cte over two shards", sharding.ErrCrossShard, func() error {
			var x []ShOrder
			return e.db.Raw("WITH x AS (SELECT * FROM orders WHERE user_id = $1) SELECT * FROM x UNION ALL SELECT * FROM orders WHERE user_id = $2", a, b).Scan(&x).Error
		}},
		{"data-modifying cte over two shards", sharding.ErrCrossShard, func() error {
			return e.db.Exec("WITH u AS (UPDATE orders SET amount = 1 WHERE user_id = ? RETURNING id) UPDATE orders SET amount = 2 WHERE user_id = ?", a, b).Error
		}},
		{"data-modifying cte without a key", sharding.ErrUnsupportedStatement, func() error {
			return e.db.Exec("WITH d AS (DELETE FROM orders WHERE status = 'new' RETURNING id) UPDATE orders SET amount = 2 WHERE user_id = ?", a).Error
		}},
		{"join of two users on two shards", sharding.ErrCrossShard, func() error {
			var x []orderSku
			return e.db.Raw("SELECT x.id, y.status AS sku FROM orders x JOIN orders y ON x.amount = y.amount WHERE x.user_id = ? AND y.user_id = ?", a, b).Scan(&x).Error
		}},
		{"join not on the key", sharding.ErrUnsupportedStatement, func() error {
			var x []orderSku
			return e.db.Raw("SELECT o.id, i.sku FROM orders o JOIN order_items i ON i.order_id = o.id WHERE o.user_id = ?", a).Scan(&x).Error
		}},
		{"join with a table of the default database", sharding.ErrUnsupportedStatement, func() error {
			var x []orderSku
			return e.db.Raw("SELECT o.id, p.name AS sku FROM orders o JOIN products p ON p.id = o.amount WHERE o.user_id = ?", a).Scan(&x).Error
		}},
		{"subquery on another shard", sharding.ErrCrossShard, func() error {
			var x []ShOrder
			return e.db.Raw("SELECT * FROM orders WHERE user_id = ? AND id IN (SELECT order_id FROM order_items WHERE user_id = ?)", a, b).Scan(&x).Error
		}},
		{"gorm joins not on the key", sharding.ErrUnsupportedStatement, func() error {
			var x []orderSku
			return e.db.Table("orders").Select("orders.id, i.sku").Joins("JOIN order_items i ON i.order_id = orders.id").Where("orders.user_id = ?", a).Scan(&x).Error
		}},
		{"gorm where subquery on another shard", sharding.ErrCrossShard, func() error {
			var x []ShOrder
			return e.db.Where("user_id = ? AND id IN (?)", a, other(e.db, b)).Find(&x).Error
		}},
		{"gorm update with a subquery on another shard", sharding.ErrCrossShard, func() error {
			return e.db.Model(&ShOrder{}).Where("user_id = ? AND id IN (?)", a, other(e.db, b)).Update("status", "zz").Error
		}},
		{"gorm delete with a keyless subquery", sharding.ErrUnsupportedStatement, func() error {
			return e.db.Where("user_id = ? AND id IN (?)", a, e.db.Table("order_items").Select("order_id").Where("sku = ?", "x")).Delete(&ShOrder{}).Error
		}},
		{"two statements over two shards", sharding.ErrCrossShard, func() error {
			return e.db.Exec("UPDATE orders SET amount = 1 WHERE user_id = 1; UPDATE orders SET amount = 2 WHERE user_id = " + strconv.FormatInt(b, 10)).Error
		}},
	}
	before := e.everyShard(t)
	for _, c := range cases {
		e.resetCounts()
		err := c.run()
		if !errors.Is(err, c.want) {
			t.Fatalf("%s: %v, want %v", c.name, err, c.want)
		}
		if n := e.countsSnapshot(); len(n) != 0 {
			t.Fatalf("%s: refused, but shards ran statements: %v", c.name, n)
		}
		t.Logf("%s: %v", c.name, err)
	}
	if after := e.everyShard(t); !reflect.DeepEqual(after, before) {
		t.Fatalf("refused statements changed rows:\n before %s\n after  %s", short(&before), short(&after))
	}
}
