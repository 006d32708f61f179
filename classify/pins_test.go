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

// TestInsertPinned: an INSERT ... VALUES pins each listed column whose
// value is an integer literal or a placeholder in every row, one value
// per row; the forms that may write another row than a listed one, or
// whose rows the statement does not list, give nil; an upsert keeps only
// the conflict target's columns that it does not assign.
func TestInsertPinned(t *testing.T) {
	p := func(col string, vs ...Value) Pin { return Pin{Column: col, Values: vs} }
	lit := func(n int64) Value { return Value{Int: n} }
	par := func(n int) Value { return Value{Param: n} }
	ins := func(table string, rows int, pins ...Pin) *Pinned {
		return &Pinned{Table: table, Rows: rows, Pins: pins}
	}
	upsert := func(table string, rows int, pins ...Pin) *Pinned {
		return &Pinned{Table: table, Rows: rows, Pins: pins, Upsert: true}
	}
	ret := func(pn *Pinned, items ...string) *Pinned {
		pn.Returning = items
		return pn
	}
	tests := []struct {
		d    Dialect
		sql  string
		want *Pinned
	}{
		{Postgres, `INSERT INTO items (id, name) VALUES ($1, $2)`, ins("items", 1, p("id", par(1)), p("name", par(2)))},
		{Postgres, `INSERT INTO "items" ("id","name","version") VALUES ($1,$2,$3),($4,$5,$6) RETURNING "id"`,
			ret(ins("items", 2, p("id", par(1), par(4)), p("name", par(2), par(5)), p("version", par(3), par(6))), "id")},
		// RETURNING: which result column is which plain column.
		{Postgres, `INSERT INTO items (name) VALUES ($1) RETURNING id, name AS n, version + 1, items.version, i.id`,
			ret(ins("items", 1, p("name", par(1))), "id", "", "", "version", "")},
		{Postgres, `INSERT INTO items AS i (name) VALUES ($1) RETURNING i.id, lower(name), "Id", (id)`,
			ret(ins("items", 1, p("name", par(1))), "id", "", "Id", "")},
		{Postgres, `INSERT INTO items (name) VALUES ($1) RETURNING id, *`, ins("items", 1, p("name", par(1)))},
		{Postgres, `INSERT INTO items (name) VALUES ($1) RETURNING items.*`, ins("items", 1, p("name", par(1)))},
		{Postgres, `INSERT INTO items (name) VALUES ($1) RETURNING id * 2, id`, ret(ins("items", 1, p("name", par(1))), "", "id")},
		{Postgres, `INSERT INTO items (name) VALUES ($1) RETURNING old.id, new.id`, ret(ins("items", 1, p("name", par(1))), "", "")},
		{MySQL, "INSERT INTO items (name) VALUES (?), (?) RETURNING `ID`, id AS id", ret(ins("items", 2, p("name", par(1), par(2))), "id", "")},
		{Postgres, `INSERT INTO items (name, id) VALUES ('x', 5), (lower('y, z'), -6)`, ins("items", 2, p("id", lit(5), lit(-6)))},
		{Postgres, `INSERT INTO items (id, name) VALUES (DEFAULT, 'x')`, ins("items", 1)},
		{Postgres, `INSERT INTO items (id) VALUES (5), (DEFAULT)`, ins("items", 2)},
		{Postgres, `INSERT INTO items (id) VALUES (NULL)`, ins("items", 1)},
		{Postgres, `INSERT INTO items (id) VALUES ($1::bigint)`, ins("items", 1)},
		{Postgres, `INSERT INTO items (id) VALUES (5.0)`, ins("items", 1)},
		{Postgres, `INSERT INTO items (id) VALUES ((5))`, ins("items", 1)},
		{Postgres, `INSERT INTO items AS i (id) VALUES (5)`, ins("items", 1, p("id", lit(5)))},
		{Postgres, `INSERT INTO public.items (id) VALUES (5)`, ins("public.items", 1, p("id", lit(5)))},
		{Postgres, `INSERT INTO items (id) OVERRIDING SYSTEM VALUE VALUES (5)`, ins("items", 1, p("id", lit(5)))},
		{Postgres, `INSERT INTO items (id) OVERRIDING USER VALUE VALUES (5)`, nil},
		// ON CONFLICT DO NOTHING inserts listed rows or none.
		{Postgres, `INSERT INTO items (id) VALUES (5) ON CONFLICT DO NOTHING`, ins("items", 1, p("id", lit(5)))},
		{Postgres, `INSERT INTO items (id, name) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING RETURNING id`,
			ret(ins("items", 1, p("id", par(1)), p("name", par(2))), "id")},
		// DO UPDATE: the conflict target's columns it does not assign.
		{Postgres, `INSERT INTO items (id, name) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name`,
			upsert("items", 1, p("id", par(1)))},
		{Postgres, `INSERT INTO items (id, name, version) VALUES (1, 'a', 2) ON CONFLICT (id) WHERE version > 0 DO UPDATE SET name = 'x' WHERE items.version < 3 RETURNING *`,
			upsert("items", 1, p("id", lit(1)))},
		{Postgres, `INSERT INTO pairs (a, b, n) VALUES (1, 2, 3) ON CONFLICT (b, a) DO UPDATE SET n = excluded.n`,
			upsert("pairs", 1, p("a", lit(1)), p("b", lit(2)))},
		{Postgres, `INSERT INTO items (id, name) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET version = 1`, upsert("items", 1, p("name", par(2)))},
		{Postgres, `INSERT INTO items (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET id = excluded.id + 1`, upsert("items", 1)},
		{Postgres, `INSERT INTO items (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET id = 1`, upsert("items", 1)},
		{Postgres, `INSERT INTO items (id) VALUES (1) ON CONFLICT ON CONSTRAINT items_pkey DO UPDATE SET name = 'x'`, upsert("items", 1)},
		{Postgres, `INSERT INTO items (id) VALUES (1) ON CONFLICT ((lower(name))) DO UPDATE SET version = 1`, upsert("items", 1)},
		{Postgres, `INSERT INTO items (id) VALUES (1) ON CONFLICT (id COLLATE "C") DO UPDATE SET version = 1`, upsert("items", 1)},
		{Postgres, `INSERT INTO items (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET (name, version) = ('x', 1)`, nil},
		{Postgres, `INSERT INTO items (id) VALUES (1) ON CONFLICT (id) DO SELECT`, nil},
		// Rows the statement does not list, or not only its own.
		{Postgres, `INSERT INTO items SELECT * FROM other`, nil},
		{Postgres, `INSERT INTO items (id) SELECT id FROM other`, nil},
		{Postgres, `INSERT INTO items (id) (SELECT 5)`, nil},
		{Postgres, `INSERT INTO items (id, name) VALUES (5, (SELECT name FROM other LIMIT 1))`, nil},
		{Postgres, `WITH n AS (SELECT 5 AS id) INSERT INTO items (id) SELECT id FROM n`, nil},
		{Postgres, `WITH d AS (DELETE FROM other WHERE id = 1) INSERT INTO items (id) VALUES (5)`, nil},
		{Postgres, `INSERT INTO items DEFAULT VALUES`, nil},
		{Postgres, `INSERT INTO items VALUES (1, 'x')`, nil},
		{Postgres, `INSERT INTO items (id, id) VALUES (1, 2)`, nil},
		{Postgres, `INSERT INTO items (id, name) VALUES (1)`, nil},
		{Postgres, `INSERT INTO items (id) VALUES (1, 2)`, nil},
		{Postgres, `INSERT INTO items (id) VALUES ()`, nil},
		{Postgres, `INSERT INTO items (a.b) VALUES (1)`, nil},
		{Postgres, `INSERT INTO items (tags[1]) VALUES (1)`, nil},
		{Postgres, `INSERT INTO items (id) VALUES (1); DELETE FROM items`, nil},
		{Postgres, `INSERT INTO items (id) VALUES (1) ORDER BY 1`, nil},
		{Postgres, `INSERT INTO items (id) VALUES (nextval('s'))`, nil}, // a write of a sequence: tables unknown
		{MySQL, "INSERT INTO `items` (`id`,`name`) VALUES (?,?),(?,?)", ins("items", 2, p("id", par(1), par(3)), p("name", par(2), par(4)))},
		{MySQL, "INSERT INTO items (ID) VALUE (5)", ins("items", 1, p("id", lit(5)))},
		{MySQL, "INSERT INTO items (id) VALUES (5) RETURNING id", ret(ins("items", 1, p("id", lit(5))), "id")},
		{MySQL, "INSERT IGNORE INTO items (id) VALUES (5)", nil},
		{MySQL, "INSERT LOW_PRIORITY INTO items (id) VALUES (5)", nil},
		{MySQL, "INSERT DELAYED INTO items (id) VALUES (5)", nil},
		{MySQL, "INSERT items (id) VALUES (5)", nil},
		{MySQL, "INSERT INTO items (id) VALUES (5) ON DUPLICATE KEY UPDATE name = 'x'", nil},
		{MySQL, "INSERT INTO items (id) VALUES (5) AS new ON DUPLICATE KEY UPDATE name = new.name", nil},
		{MySQL, "INSERT INTO items (id) VALUES (5) ON CONFLICT DO NOTHING", nil},
		{MySQL, "REPLACE INTO items (id) VALUES (5)", nil},
		{MySQL, "INSERT INTO items SET id = 5", nil},
		{MySQL, "INSERT INTO items PARTITION (p0) (id) VALUES (5)", nil},
		{MySQL, "INSERT INTO items (id) VALUES ROW(5)", nil},
		{MySQL, "INSERT INTO items (id) SELECT id FROM other", nil},
		{MySQL, "INSERT INTO items (id) TABLE other", nil},
	}
	for _, tt := range tests {
		c := New(Config{Dialect: tt.d, CacheSize: -1})
		got := c.Classify(tt.sql).Pinned
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s %q:\n got %+v\nwant %+v", tt.d, tt.sql, got, tt.want)
		}
	}
}
