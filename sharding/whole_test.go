package sharding

import (
	"context"
	"errors"
	"slices"
	"testing"

	"gorm.io/gorm"

	"github.com/freshread/freshread/classify"
)

// idIsUser resolves order ID n to user n (so to shard n%4).
type idIsUser struct{}

func (idIsUser) Put(context.Context, []Pair) error     { return nil }
func (idIsUser) Delete(context.Context, []int64) error { return nil }
func (idIsUser) Resolve(_ context.Context, ids []int64) (map[int64]int64, error) {
	out := map[int64]int64{}
	for _, id := range ids {
		out[id] = id
	}
	return out, nil
}

// wholeTest is a plugin over four shards, user k on shard k%4: orders
// (user_id, id) and order_items (user_id) sharded, every other table on
// the default database.
func wholeTest() (*Sharding, placer) {
	s := &Sharding{cfg: Config{Lookup: idIsUser{}}, classifier: classify.New(classify.Config{Dialect: classify.Postgres})}
	s.tables = map[string]*tableInfo{
		"orders":      {Table: Table{Name: "orders", Key: "user_id", ID: "id"}, name: "orders", key: "user_id", id: "id"},
		"order_items": {Table: Table{Name: "order_items", Key: "user_id"}, name: "order_items", key: "user_id"},
	}
	for i, n := range []string{"s0", "s1", "s2", "s3"} {
		s.shards = append(s.shards, &shard{name: n, index: i})
	}
	return s, placer{rt: &routing{shards: 4, bucketShard: []uint8{0, 1, 2, 3}, owning: 0xf}}
}

// The decision over statement shapes: the shard every part pins, a
// co-located statement left to the ordinary routing, or a refusal.
// Users 1 and 5 live on shard 1, user 2 on shard 2.
func TestWholeDecision(t *testing.T) {
	const (
		routed      = iota // to want's one shard
		asIs               // co-located or single: the ordinary routing goes on
		cross              // ErrCrossShard
		unsupported        // ErrUnsupportedStatement
		concat             // on want's shards, the answers concatenated
	)
	cases := []struct {
		name string
		sql  string
		vars []any
		want int
		mask uint64
	}{
		// Set operations.
		{"union all, one user", "SELECT * FROM orders WHERE user_id = 1 UNION ALL SELECT * FROM orders WHERE user_id = 1", nil, routed, 1 << 1},
		{"union all, same shard", "SELECT * FROM orders WHERE user_id = $1 UNION ALL SELECT * FROM orders WHERE user_id = $2", []any{1, 5}, routed, 1 << 1},
		{"union all, two shards", "SELECT * FROM orders WHERE user_id = $1 UNION ALL SELECT * FROM orders WHERE user_id = $2", []any{1, 2}, concat, 1<<1 | 1<<2},
		{"union all, two shards, parenthesized", "(SELECT * FROM orders WHERE user_id = 1) UNION ALL (SELECT * FROM orders WHERE user_id = 2)", nil, concat, 1<<1 | 1<<2},
		{"union all of a join on the key", "SELECT o.id FROM orders o JOIN order_items i ON i.user_id = o.user_id WHERE o.user_id = 1 UNION ALL SELECT id FROM orders WHERE user_id = 2", nil, concat, 1<<1 | 1<<2},
		{"union all, two shards, ordered", "SELECT * FROM orders WHERE user_id = 1 UNION ALL SELECT * FROM orders WHERE user_id = 2 ORDER BY id", nil, cross, 0},
		{"union all, two shards, limited part", "(SELECT * FROM orders WHERE user_id = 1 LIMIT 2) UNION ALL (SELECT * FROM orders WHERE user_id = 2)", nil, cross, 0},
		{"union all, two shards, counts", "SELECT count(*) FROM orders WHERE user_id = 1 UNION ALL SELECT count(*) FROM orders WHERE user_id = 2", nil, cross, 0},
		{"union all, two shards, distinct part", "SELECT DISTINCT status FROM orders WHERE user_id = 1 UNION ALL SELECT status FROM orders WHERE user_id = 2", nil, cross, 0},
		{"union all, two shards, a constant part", "SELECT id FROM orders WHERE user_id = 1 UNION ALL SELECT id FROM orders WHERE user_id = 2 UNION ALL SELECT 7", nil, cross, 0},
		{"union all, two shards, a subquery", "SELECT id FROM orders WHERE user_id = 1 AND id IN (SELECT order_id FROM order_items WHERE user_id = 1) UNION ALL SELECT id FROM orders WHERE user_id = 2", nil, cross, 0},
		{"union all within a union", "(SELECT id FROM orders WHERE user_id = 1 UNION ALL SELECT id FROM orders WHERE user_id = 2) UNION SELECT id FROM orders WHERE user_id = 5", nil, cross, 0},
		{"union all, two shards, a join not on the key", "SELECT a.id FROM orders a JOIN orders b ON a.status = b.status WHERE a.user_id = 1 AND b.user_id = 1 UNION ALL SELECT id FROM orders WHERE user_id = 2", nil, cross, 0},
		{"union, two shards, ?", "SELECT id FROM orders WHERE user_id = ? UNION SELECT id FROM orders WHERE user_id = ?", []any{1, 2}, cross, 0},
		{"intersect", "SELECT id FROM orders WHERE user_id = 1 INTERSECT SELECT id FROM orders WHERE user_id = 2", nil, cross, 0},
		{"except, same shard", "(SELECT id FROM orders WHERE user_id = 1) EXCEPT (SELECT id FROM orders WHERE user_id = 5)", nil, routed, 1 << 1},
		{"union, one part keyless", "SELECT * FROM orders WHERE user_id = 1 UNION ALL SELECT * FROM orders WHERE status = 'x'", nil, unsupported, 0},
		{"union with an IN over two shards", "SELECT * FROM orders WHERE user_id IN (1, 2) UNION ALL SELECT * FROM orders WHERE user_id = 1", nil, concat, 1<<1 | 1<<2},
		// CTEs.
		{"cte read, one shard", "WITH a AS (SELECT * FROM orders WHERE user_id = 1) SELECT * FROM a UNION ALL SELECT * FROM orders WHERE user_id = 5", nil, routed, 1 << 1},
		{"cte read, two shards", "WITH a AS (SELECT * FROM orders WHERE user_id = 1) SELECT * FROM a UNION ALL SELECT * FROM orders WHERE user_id = 2", nil, cross, 0},
		{"cte, main keyless", "WITH a AS (SELECT * FROM orders WHERE user_id = 1) SELECT * FROM orders WHERE id IN (SELECT id FROM a)", nil, unsupported, 0},
		{"data-modifying cte, two shards", "WITH u AS (UPDATE orders SET status = 'a' WHERE user_id = 1 RETURNING id) UPDATE orders SET status = 'b' WHERE user_id = 2", nil, cross, 0},
		{"data-modifying cte, one shard", "WITH u AS (UPDATE orders SET status = 'a' WHERE user_id = 1 RETURNING id) UPDATE orders SET status = 'b' WHERE user_id = 5", nil, routed, 1 << 1},
		{"data-modifying cte, keyless body", "WITH u AS (DELETE FROM orders WHERE status = 'x' RETURNING id) SELECT * FROM orders WHERE user_id = 1", nil, unsupported, 0},
		{"recursive cte", "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 3) SELECT * FROM orders, t WHERE orders.user_id = 2", nil, routed, 1 << 2},
		{"recursive cte over orders", "WITH RECURSIVE t AS (SELECT id FROM orders WHERE user_id = 1 UNION ALL SELECT o.id FROM orders o JOIN t ON o.id = t.id + 1) SELECT * FROM t", nil, unsupported, 0},
		{"cte insert", "WITH x AS (INSERT INTO orders (id, user_id) VALUES (9, 1) RETURNING id) SELECT * FROM orders WHERE user_id = 1", nil, unsupported, 0},
		// Joins.
		{"join on the key, one user", "SELECT * FROM orders o JOIN order_items i ON i.user_id = o.user_id WHERE o.user_id = 2", nil, routed, 1 << 2},
		{"join on the key, no key", "SELECT * FROM orders o JOIN order_items i ON i.user_id = o.user_id AND i.sku = 'x'", nil, asIs, 0},
		{"join using the key", "SELECT * FROM orders JOIN order_items USING (user_id) WHERE orders.user_id = 2", nil, routed, 1 << 2},
		{"join, two users on two shards", "SELECT * FROM orders a JOIN orders b ON a.status = b.status WHERE a.user_id = 1 AND b.user_id = 2", nil, cross, 0},
		{"join, two users on one shard", "SELECT * FROM orders a JOIN orders b ON a.status = b.status WHERE a.user_id = 1 AND b.user_id = 5", nil, routed, 1 << 1},
		{"join not on the key, one side pinned", "SELECT * FROM orders o JOIN order_items i ON i.order_id = o.id WHERE o.user_id = 1", nil, unsupported, 0},
		{"left join, pinned by its ON", "SELECT * FROM orders o LEFT JOIN order_items i ON i.order_id = o.id AND i.user_id = o.user_id WHERE o.user_id = 1", nil, routed, 1 << 1},
		{"comma join", "SELECT * FROM orders o, order_items i WHERE i.user_id = o.user_id AND o.user_id = 2", nil, routed, 1 << 2},
		{"join sharded x unsharded", "SELECT * FROM orders o JOIN products p ON p.id = o.product_id WHERE o.user_id = 1", nil, unsupported, 0},
		{"join by order ID", "SELECT * FROM orders o JOIN order_items i ON i.user_id = o.user_id WHERE o.id = 6", nil, routed, 1 << 2},
		{"update from, one shard", "UPDATE orders o SET status = 'x' FROM order_items i WHERE i.user_id = o.user_id AND o.user_id = 1", nil, routed, 1 << 1},
		// Subqueries.
		{"subquery, same user", "SELECT * FROM orders WHERE user_id = 1 AND id IN (SELECT order_id FROM order_items WHERE user_id = 1)", nil, routed, 1 << 1},
		{"subquery, other shard", "SELECT * FROM orders WHERE user_id = 1 AND id IN (SELECT order_id FROM order_items WHERE user_id = 2)", nil, cross, 0},
		{"subquery, keyless", "SELECT * FROM orders WHERE user_id = 1 AND id IN (SELECT order_id FROM order_items WHERE sku = 'x')", nil, unsupported, 0},
		{"correlated subquery", "SELECT * FROM orders o WHERE o.user_id = 2 AND EXISTS (SELECT 1 FROM order_items i WHERE i.user_id = o.user_id)", nil, routed, 1 << 2},
		{"derived table", "SELECT * FROM (SELECT * FROM orders WHERE user_id = 2) x", nil, routed, 1 << 2},
		{"subquery of an unsharded table", "SELECT * FROM orders WHERE user_id = 1 AND status IN (SELECT name FROM statuses)", nil, unsupported, 0},
		{"scalar subquery in the select list", "SELECT id, (SELECT count(*) FROM order_items i WHERE i.user_id = 2) FROM orders WHERE user_id = 1", nil, cross, 0},
		// Aliases and single tables: the ordinary routing (an alias is read).
		{"alias", "SELECT * FROM orders o WHERE o.user_id = 2", nil, asIs, 1 << 2},
		{"alias with AS, quoted", `UPDATE "orders" AS "o" SET status = 'x' WHERE "o"."user_id" = $1`, []any{3}, asIs, 1 << 3},
		{"plain", "SELECT * FROM orders WHERE status = 'x'", nil, asIs, 0},
		{"is distinct from", "SELECT * FROM orders WHERE status IS DISTINCT FROM 'x' AND user_id = 1", nil, asIs, 1 << 1},
		{"insert", "INSERT INTO orders (id, user_id) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET status = 'x' WHERE orders.user_id = 2", nil, asIs, 0},
		{"function in from", "SELECT * FROM orders, generate_series(1, 3) g WHERE orders.user_id = 1", nil, asIs, 1 << 1},
		{"insert select", "INSERT INTO orders (id, user_id) SELECT id + 1, 2 FROM orders WHERE user_id = 1", nil, unsupported, 0},
		{"cte named like the table", "WITH orders AS (SELECT * FROM orders WHERE user_id = 1) SELECT * FROM orders", nil, unsupported, 0},
		{"lateral", "SELECT * FROM orders o, LATERAL (SELECT * FROM order_items i WHERE i.user_id = o.user_id) x WHERE o.user_id = 3", nil, routed, 1 << 3},
		{"right join pins nothing by its ON", "SELECT * FROM orders a RIGHT JOIN orders b ON b.user_id = 1 AND a.status = b.status WHERE a.user_id = 1", nil, unsupported, 0},
		// Several statements.
		{"two statements, two shards", "UPDATE orders SET status = 'a' WHERE user_id = 1; UPDATE orders SET status = 'b' WHERE user_id = 2", nil, cross, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, pl := wholeTest()
			tg := &target{t: s.tables["orders"], op: opRaw, raw: true, pl: pl, split: -1}
			v, err := s.decideWhole(context.Background(), tg, c.sql, c.vars)
			switch c.want {
			case cross, unsupported:
				sentinel := ErrCrossShard
				if c.want == unsupported {
					sentinel = ErrUnsupportedStatement
				}
				if !errors.Is(err, sentinel) {
					t.Fatalf("%s\n%+v, %v; want %v", c.sql, v, err, sentinel)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", c.sql, err)
			}
			switch c.want {
			case routed:
				if v.single || !v.bounded || v.mask != c.mask {
					t.Fatalf("%s: %+v, want routed to %b", c.sql, v, c.mask)
				}
			case concat:
				if v.single || v.colocated || !v.bounded || v.mask != c.mask {
					t.Fatalf("%s: %+v, want run on %b, the answers concatenated", c.sql, v, c.mask)
				}
			case asIs:
				if !v.single && !v.colocated {
					t.Fatalf("%s: %+v, want the ordinary routing", c.sql, v)
				}
				if c.mask != 0 && (!v.bounded || v.mask != c.mask) {
					t.Fatalf("%s: %+v, want pinned to %b", c.sql, v, c.mask)
				}
			}
		})
	}
}

// Statements built with the GORM API that the router must see whole
// (Joins, subqueries in Where, in reads and writes) are rendered and
// decided like raw SQL, before any shard runs them. Users 1 and 2 live on
// s0, user 300 on s1.
func TestWholeGORM(t *testing.T) {
	mt := newMapTest(t, nil, func(c *Config) {
		c.Tables = append(c.Tables, Table{Name: "order_items", Key: "user_id"})
	})
	items := func(u int64) *gorm.DB {
		return mt.db.Table("order_items").Select("order_id").Where("user_id = ?", u)
	}
	cases := []struct {
		name string
		run  func() error
		want error    // nil: routed to shards
		to   []string // where it runs
	}{
		{"joins on the key, one user", func() error {
			var x []benchOrder
			return mt.db.Joins("JOIN order_items i ON i.user_id = orders.user_id AND i.order_id = orders.id").Where("orders.user_id = ?", 300).Find(&x).Error
		}, nil, []string{"s1"}},
		{"joins with an alias", func() error {
			var x []benchOrder
			return mt.db.Table("orders o").Joins("JOIN order_items i ON i.user_id = o.user_id").Where("o.user_id = ?", 300).Find(&x).Error
		}, nil, []string{"s1"}},
		{"joins on the key, no key", func() error {
			var x []benchOrder
			return mt.db.Joins("JOIN order_items i ON i.user_id = orders.user_id").Where("i.order_id > ?", 5).Find(&x).Error
		}, nil, []string{"s0", "s1", "s2", "s3"}},
		{"joins not on the key", func() error {
			var x []benchOrder
			return mt.db.Joins("JOIN order_items i ON i.order_id = orders.id").Where("orders.user_id = ?", 1).Find(&x).Error
		}, ErrUnsupportedStatement, nil},
		{"joins an unsharded table", func() error {
			var x []benchOrder
			return mt.db.Joins("JOIN products p ON p.id = orders.id").Where("orders.user_id = ?", 1).Find(&x).Error
		}, ErrUnsupportedStatement, nil},
		{"where subquery, same shard", func() error {
			var x []benchOrder
			return mt.db.Where("user_id = ? AND id IN (?)", 1, items(2)).Find(&x).Error
		}, nil, []string{"s0"}},
		{"where subquery, other shard", func() error {
			var x []benchOrder
			return mt.db.Where("user_id = ? AND id IN (?)", 1, items(300)).Find(&x).Error
		}, ErrCrossShard, nil},
		{"update with a subquery on another shard", func() error {
			return mt.db.Model(&benchOrder{}).Where("user_id = ? AND id IN (?)", 1, items(300)).Update("status", "x").Error
		}, ErrCrossShard, nil},
		{"delete with a keyless subquery", func() error {
			return mt.db.Where("user_id = ? AND id IN (?)", 1, mt.db.Table("order_items").Select("order_id")).Delete(&benchOrder{}).Error
		}, ErrUnsupportedStatement, nil},
		{"update with a subquery of the same user", func() error {
			return mt.db.Model(&benchOrder{}).Where("user_id = ? AND id IN (?)", 300, items(300)).Update("status", "x").Error
		}, nil, []string{"s1"}},
		{"update setting a subquery of another shard", func() error {
			return mt.db.Model(&benchOrder{}).Where("user_id = ?", 1).Update("status", items(300)).Error
		}, ErrCrossShard, nil},
		{"updates setting a subquery of the same shard", func() error {
			return mt.db.Model(&benchOrder{}).Where("user_id = ?", 1).Updates(map[string]any{"status": items(2)}).Error
		}, nil, []string{"s0"}},
		{"raw union over two shards, ordered", func() error {
			var x []benchOrder
			return mt.db.Raw("SELECT * FROM orders WHERE user_id = ? UNION ALL SELECT * FROM orders WHERE user_id = ? ORDER BY id", 1, 300).Scan(&x).Error
		}, ErrCrossShard, nil},
		{"raw union of one shard", func() error {
			return mt.db.Exec("WITH u AS (UPDATE orders SET status = 'a' WHERE user_id = ? RETURNING id) UPDATE orders SET status = 'b' WHERE user_id = ?", 1, 2).Error
		}, nil, []string{"s0"}},
	}
	for _, c := range cases {
		mt.reset()
		err := c.run()
		if c.want != nil {
			if !errors.Is(err, c.want) {
				t.Fatalf("%s: %v, want %v", c.name, err, c.want)
			}
			if got := mt.shards(); len(got) != 0 {
				t.Fatalf("%s: refused, but ran on %v", c.name, got)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := mt.shards()
		slices.Sort(got)
		if !slices.Equal(got, c.to) {
			t.Fatalf("%s: ran on %v, want %v", c.name, got, c.to)
		}
	}
}

// readWhole and the decision never panic, whatever the text.
func FuzzReadWhole(f *testing.F) {
	for _, sql := range []string{
		"WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 3) SELECT * FROM orders, t WHERE orders.user_id = 2",
		"SELECT * FROM orders o LEFT JOIN order_items i USING (user_id) WHERE o.user_id = ? AND i.order_id IN (SELECT id FROM orders WHERE user_id = ?)",
		"WITH u AS (UPDATE orders SET status = 'a' WHERE user_id = 1 RETURNING id) UPDATE orders SET status = 'b' WHERE user_id = 2; DELETE FROM orders USING order_items i WHERE i.user_id = orders.user_id",
		"(SELECT id FROM orders WHERE user_id = $1) EXCEPT ((SELECT id FROM orders o, LATERAL (SELECT 1) x WHERE o.user_id = $2))",
		"INSERT INTO orders (id, user_id) SELECT id, user_id FROM orders WHERE id = ANY(ARRAY[1, 2]) ON CONFLICT (id) DO UPDATE SET status = 'x'",
		"SELECT * FROM orders WHERE (user_id = 1 OR user_id = 2) AND amount BETWEEN 1 AND 2 AND status IS DISTINCT FROM 'x'",
	} {
		f.Add(sql)
	}
	s, pl := wholeTest()
	f.Fuzz(func(t *testing.T, sql string) {
		tg := &target{t: s.tables["orders"], op: opRaw, raw: true, pl: pl, split: -1}
		_, _ = s.decideWhole(context.Background(), tg, sql, []any{1, 2})
	})
}
