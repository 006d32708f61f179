package classify

import (
	"reflect"
	"testing"
)

func TestPinned(t *testing.T) {
	p := func(col string, vs ...Value) Pin { return Pin{Column: col, Values: vs} }
	lit := func(n int64) Value { return Value{Int: n} }
	par := func(n int) Value { return Value{Param: n} }
	tests := []struct {
		d    Dialect
		sql  string
		want *Pinned
	}{
		{Postgres, `SELECT * FROM users WHERE id = 5`, &Pinned{Table: "users", Pins: []Pin{p("id", lit(5))}}},
		{Postgres, `SELECT * FROM "users" WHERE "users"."id" = $1 LIMIT 1`, &Pinned{Table: "users", Pins: []Pin{p("id", par(1))}}},
		{Postgres, `select name, count(*) from public.users u where u.id in ($2, $1, 7) and name <> 'x' group by name`,
			&Pinned{Table: "public.users", Pins: []Pin{p("id", par(2), par(1), lit(7))}}},
		{Postgres, `SELECT * FROM users WHERE 5 = id AND -3 = user_id`, &Pinned{Table: "users", Pins: []Pin{p("id", lit(5)), p("user_id", lit(-3))}}},
		{Postgres, `SELECT * FROM users WHERE id = ANY($1)`, &Pinned{Table: "users", Pins: []Pin{p("id", Value{Param: 1, Array: true})}}},
		{Postgres, `SELECT * FROM users WHERE "ID" = 5`, &Pinned{Table: "users", Pins: []Pin{p("ID", lit(5))}}},
		{Postgres, `SELECT * FROM users WHERE name = 'x'`, &Pinned{Table: "users"}},
		{Postgres, `SELECT * FROM users WHERE id = 5 OR id = 6`, nil},
		{Postgres, `SELECT * FROM users WHERE id = 5.0`, &Pinned{Table: "users"}},
		{Postgres, `SELECT * FROM users WHERE id = $1::bigint`, &Pinned{Table: "users"}},
		{Postgres, `SELECT * FROM users WHERE id = '5'`, &Pinned{Table: "users"}},
		{Postgres, `SELECT * FROM users WHERE NOT id = 5`, &Pinned{Table: "users"}},
		{Postgres, `SELECT * FROM users WHERE id + 0 = 5`, &Pinned{Table: "users"}},
		{Postgres, `SELECT * FROM users WHERE x.id = 5`, &Pinned{Table: "users"}},
		{Postgres, `SELECT * FROM users WHERE id IN (5, name)`, &Pinned{Table: "users"}},
		{Postgres, `SELECT * FROM users WHERE id IN (SELECT user_id FROM orders)`, nil},
		{Postgres, `SELECT * FROM users JOIN orders ON orders.user_id = users.id WHERE users.id = 5`, nil},
		{Postgres, `SELECT * FROM users, orders WHERE users.id = 5`, nil},
		{Postgres, `SELECT * FROM users WHERE id BETWEEN 1 AND 5`, nil},
		{Postgres, `SELECT * FROM users WHERE CASE WHEN a THEN true END AND id = 5`, nil},
		{Postgres, `SELECT * FROM users`, nil},
		{Postgres, `SELECT * FROM users WHERE id = 5 FOR UPDATE`, nil},
		{Postgres, `SELECT * FROM users WHERE id = 5; SELECT 1`, nil},
		{Postgres, `SELECT * FROM ONLY users WHERE id = 5`, nil},
		{Postgres, `UPDATE users SET name = $1, age = 3 WHERE id = $2`,
			&Pinned{Table: "users", Pins: []Pin{p("id", par(2))}, Sets: []Set{{Column: "name", Value: par(1), Known: true}, {Column: "age", Value: lit(3), Known: true}}}},
		{Postgres, `UPDATE users AS u SET age = age + 1 WHERE u.id = 5 RETURNING *`,
			&Pinned{Table: "users", Pins: []Pin{p("id", lit(5))}, Sets: []Set{{Column: "age"}}}},
		{Postgres, `UPDATE users SET age = 1 FROM orders WHERE users.id = 5`, nil},
		{Postgres, `UPDATE users SET (a, b) = (1, 2) WHERE id = 5`, nil},
		{Postgres, `DELETE FROM users WHERE id IN ($1,$2)`, &Pinned{Table: "users", Pins: []Pin{p("id", par(1), par(2))}}},
		{Postgres, `DELETE FROM "pairs" WHERE ("pairs"."a","pairs"."b") IN (($1,$2))`,
			&Pinned{Table: "pairs", Pins: []Pin{p("a", par(1)), p("b", par(2))}}},
		{Postgres, `SELECT * FROM pairs WHERE (a, b) IN ((1, $1), (3, -4)) AND c = 5`,
			&Pinned{Table: "pairs", Pins: []Pin{p("a", lit(1), lit(3)), p("b", par(1), lit(-4)), p("c", lit(5))}}},
		{Postgres, `SELECT * FROM pairs WHERE (a, b) = (1, 2)`, &Pinned{Table: "pairs", Pins: []Pin{p("a", lit(1)), p("b", lit(2))}}},
		{Postgres, `SELECT * FROM pairs WHERE (a, b) IN ((1, 2, 3))`, &Pinned{Table: "pairs"}},
		{Postgres, `SELECT * FROM pairs WHERE (a, b) IN ((1, 2), (3))`, &Pinned{Table: "pairs"}},
		{Postgres, `SELECT * FROM pairs WHERE (a, b) IN ((1, 2)) AND (a + 1, b) = (2, 2)`, &Pinned{Table: "pairs", Pins: []Pin{p("a", lit(1)), p("b", lit(2))}}},
		{Postgres, `SELECT * FROM pairs WHERE (a, b) > (1, 2)`, &Pinned{Table: "pairs"}},
		{Postgres, `SELECT * FROM pairs WHERE (a = 1) AND b = 2`, &Pinned{Table: "pairs", Pins: []Pin{p("b", lit(2))}}},
		{Postgres, `DELETE FROM users USING orders WHERE users.id = 5`, nil},
		{Postgres, `DELETE FROM users`, nil},
		{Postgres, `INSERT INTO users (id) VALUES (5)`, nil},
		{Postgres, `SELECT nextval('s') FROM users WHERE id = 5`, nil}, // a write: not a pinned read
		{MySQL, "SELECT * FROM `users` WHERE `users`.`id` = ? AND name = ? AND `ID` IN (?, 4)",
			&Pinned{Table: "users", Pins: []Pin{p("id", par(1)), p("name", par(2)), p("id", par(3), lit(4))}}},
		{MySQL, "UPDATE users SET name = ? WHERE id = ? LIMIT 1", &Pinned{Table: "users", Pins: []Pin{p("id", par(2))}, Sets: []Set{{Column: "name", Value: par(1), Known: true}}}},
		{MySQL, "UPDATE users, orders SET users.a = 1 WHERE users.id = 5", nil},
		{MySQL, "DELETE users FROM users JOIN orders WHERE users.id = 5", nil},
		{MySQL, "SELECT * FROM users WHERE id = 5 || id = 6", nil},
		{MySQL, "SELECT * FROM users WHERE id = 5 && name = 'x'", &Pinned{Table: "users", Pins: []Pin{p("id", lit(5))}}},
		{MySQL, "UPDATE `pairs` SET `n`=? WHERE (`pairs`.`a`,`pairs`.`b`) IN ((?,?))",
			&Pinned{Table: "pairs", Pins: []Pin{p("a", par(2)), p("b", par(3))}, Sets: []Set{{Column: "n", Value: par(1), Known: true}}}},
	}
	for _, tt := range tests {
		c := New(Config{Dialect: tt.d, CacheSize: -1})
		got := c.Classify(tt.sql).Pinned
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s %q:\n got %+v\nwant %+v", tt.d, tt.sql, got, tt.want)
		}
	}
}
