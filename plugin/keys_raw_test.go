package plugin

import (
	"context"
	"slices"
	"testing"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/lsnstore"
)

// TestRawInsertKeys: a raw INSERT whose column list names every column
// of the table's primary key, with a value in each row, raises those
// rows' keys (and KeyColumns' values, or their unkeyed positions); an
// INSERT that may write a row it does not list raises the table.
func TestRawInsertKeys(t *testing.T) {
	const u = "550e8400-e29b-41d4-a716-446655440000"
	keys := map[string]*keyDef{
		"items":  intKey("id"),
		"parts":  intKey("id"),
		"tokens": newKeyDef([]string{"id"}, []keyType{keyUUID}),
		"lines":  newKeyDef([]string{"order_id", "n"}, []keyType{keyUUID, keyInt}),
		"codes":  newKeyDef([]string{"code"}, []keyType{{kind: kindText}}),
	}
	item := func(id int64) string { return lsnstore.KeyName("items", "id", id) }
	for _, tc := range []struct {
		d     classify.Dialect
		sql   string
		vars  []any
		table string
		want  []string // the names besides the signed table; nil: the table
	}{
		{classify.Postgres, `INSERT INTO items (id, name) VALUES ($1, $2)`, []any{5, "x"}, "items", []string{item(5)}},
		{classify.Postgres, `INSERT INTO items (name, id) VALUES ($1, $2), ('y', 6) RETURNING id`, []any{"x", int64(5)}, "items", []string{item(5), item(6)}},
		{classify.Postgres, `INSERT INTO items (id) VALUES (5) ON CONFLICT DO NOTHING`, nil, "items", []string{item(5)}},
		{classify.Postgres, `INSERT INTO items (id, name) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET name = excluded.name`, []any{5, "x"}, "items", []string{item(5)}},
		{classify.Postgres, `INSERT INTO items (id) OVERRIDING SYSTEM VALUE VALUES (5)`, nil, "items", []string{item(5)}},
		// Not proved: the database assigns the key, or the statement
		// may write a row it does not list.
		{classify.Postgres, `INSERT INTO items (name) VALUES ($1) RETURNING id`, []any{"x"}, "items", nil},
		{classify.Postgres, `INSERT INTO items (id, name) VALUES (DEFAULT, 'x')`, nil, "items", nil},
		{classify.Postgres, `INSERT INTO items (id, name) VALUES (5, 'x'), (DEFAULT, 'y')`, nil, "items", nil},
		{classify.Postgres, `INSERT INTO items (id, name) VALUES ($1 + 1, 'x')`, []any{5}, "items", nil},
		{classify.Postgres, `INSERT INTO items (id) VALUES ($1)`, []any{"5"}, "items", nil}, // a string, not an integer
		{classify.Postgres, `INSERT INTO items (id) VALUES ($1)`, []any{nil}, "items", nil},
		{classify.Postgres, `INSERT INTO items (id, name) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET version = 1`, []any{5, "x"}, "items", nil},
		{classify.Postgres, `INSERT INTO items (id) VALUES (5) ON CONFLICT ON CONSTRAINT items_pkey DO UPDATE SET name = 'x'`, nil, "items", nil},
		{classify.Postgres, `INSERT INTO items (id) VALUES (5) ON CONFLICT (id) DO UPDATE SET id = 6`, nil, "items", nil},
		{classify.Postgres, `INSERT INTO items (id) OVERRIDING USER VALUE VALUES (5)`, nil, "items", nil},
		{classify.Postgres, `INSERT INTO items (id, name) SELECT id, name FROM others`, nil, "items", nil},
		{classify.Postgres, `WITH n AS (SELECT 5) INSERT INTO items (id) VALUES (5)`, nil, "items", nil},
		// KeyColumns: each value, or the column's unkeyed position.
		{classify.Postgres, `INSERT INTO parts (id, item_id, label) VALUES (1, $1, 'a'), (2, $2, 'b')`, []any{3, 4}, "parts",
			[]string{lsnstore.KeyName("parts", "id", 1), lsnstore.KeyName("parts", "id", 2), lsnstore.KeyName("parts", "item_id", 3), lsnstore.KeyName("parts", "item_id", 4)}},
		{classify.Postgres, `INSERT INTO parts (id, label) VALUES (1, 'a')`, nil, "parts",
			[]string{lsnstore.KeyName("parts", "id", 1), lsnstore.UnkeyedColumnName("parts", "item_id")}},
		{classify.Postgres, `INSERT INTO parts (item_id, label) VALUES (3, 'a')`, nil, "parts",
			[]string{lsnstore.UnkeyedColumnName("parts", "id"), lsnstore.KeyName("parts", "item_id", 3)}},
		{classify.Postgres, `INSERT INTO parts (id, item_id) VALUES (1, 3) ON CONFLICT (id) DO UPDATE SET label = 'x'`, nil, "parts",
			[]string{lsnstore.KeyName("parts", "id", 1), lsnstore.UnkeyedColumnName("parts", "item_id")}},
		// Other key types: the canonical forms.
		{classify.Postgres, `INSERT INTO tokens (id, name) VALUES ($1, $2)`, []any{"550E8400-E29B-41D4-A716-446655440000", "x"}, "tokens",
			[]string{lsnstore.KeyNameText("tokens", "id", u)}},
		{classify.Postgres, `INSERT INTO tokens (id, name) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET name = excluded.name`, []any{u, "x"}, "tokens",
			[]string{lsnstore.KeyNameText("tokens", "id", u)}},
		{classify.Postgres, `INSERT INTO lines (n, order_id, name) VALUES ($1, $2, 'a'), (4, $3, 'b')`, []any{3, u, u}, "lines",
			[]string{lsnstore.KeyNameText("lines", "order_id,n", u+",3"), lsnstore.KeyNameText("lines", "order_id,n", u+",4")}},
		{classify.Postgres, `INSERT INTO lines (n, order_id) VALUES ($1, $2), (4, DEFAULT)`, []any{3, u}, "lines", nil},
		{classify.Postgres, `INSERT INTO lines (n, name) VALUES (3, 'a')`, nil, "lines", nil},
		{classify.Postgres, `INSERT INTO codes (code, name) VALUES ($1, 'a') ON CONFLICT DO NOTHING`, []any{"a,b"}, "codes",
			[]string{lsnstore.KeyNameText("codes", "code", "a%2cb")}},
		{classify.Postgres, `INSERT INTO codes (code) VALUES ('a')`, nil, "codes", nil}, // a string literal
		// A unique index on code under another collation may be the arbiter.
		{classify.Postgres, `INSERT INTO codes (code, name) VALUES ($1, 'a') ON CONFLICT (code) DO UPDATE SET name = 'b'`, []any{"a"}, "codes", nil},
		{classify.MySQL, "INSERT INTO `items` (`id`,`name`) VALUES (?,?)", []any{5, "x"}, "items", []string{item(5)}},
		{classify.MySQL, "INSERT INTO items (id, name) VALUES (?, ?) RETURNING id", []any{int64(-5), "x"}, "items", []string{item(-5)}},
		// 0 takes the next AUTO_INCREMENT value.
		{classify.MySQL, "INSERT INTO items (id, name) VALUES (?, ?)", []any{0, "x"}, "items", nil},
		{classify.MySQL, "INSERT INTO items (id, name) VALUES (0, 'x')", nil, "items", nil},
		{classify.MySQL, "INSERT INTO items (id, name) VALUES (?, ?) ON DUPLICATE KEY UPDATE name = 'y'", []any{5, "x"}, "items", nil},
		{classify.MySQL, "REPLACE INTO items (id, name) VALUES (?, ?)", []any{5, "x"}, "items", nil},
		{classify.MySQL, "INSERT IGNORE INTO items (id, name) VALUES (?, ?)", []any{5, "x"}, "items", nil},
		{classify.MySQL, "INSERT INTO items (id, name) SELECT id, name FROM others", nil, "items", nil},
	} {
		p := catalogKeysPlugin(keys, tc.d)
		c := p.classify(tc.sql)
		if c.kind != kindWrite || len(c.writes) != 1 || c.writes[0] != tc.table {
			t.Fatalf("%s: classified %+v", tc.sql, c)
		}
		names := p.rawWriteNames(context.Background(), c, tc.vars)
		if tc.want == nil {
			if !slices.Equal(names, []string{tc.table}) {
				t.Errorf("%s %s %v: names %v, want the table", tc.d, tc.sql, tc.vars, names)
			}
			continue
		}
		if len(names) == 0 || !slices.Equal(names[1:], tc.want) {
			t.Errorf("%s %s %v: names %v, want the signed table and %v", tc.d, tc.sql, tc.vars, names, tc.want)
		}
	}
}
