package sharding

import "testing"

func TestRawKeyAssign(t *testing.T) {
	ti := &tableInfo{name: "orders", key: "user_id", id: "id"}
	match := ti.matcher(false)
	cases := []struct {
		sql    string
		vars   []any
		want   keyAssign
		upsert bool
	}{
		{"UPDATE orders SET status = ? WHERE id = ?", []any{"x", 5}, keyAssign{}, false},
		{"UPDATE orders SET user_id = ? WHERE id = ?", []any{int64(7), 5}, keyAssign{true, true, 7}, false},
		{"UPDATE orders SET status = ?, user_id = ? WHERE id = ?", []any{"x", 8, 5}, keyAssign{true, true, 8}, false},
		{"UPDATE orders SET user_id = $2, status = $1 WHERE id = $3", []any{"x", 9, 5}, keyAssign{true, true, 9}, false},
		{"UPDATE orders SET user_id = 11 WHERE id = 5", nil, keyAssign{true, true, 11}, false},
		{"UPDATE orders SET user_id = user_id + 1 WHERE id = 5", nil, keyAssign{assigned: true}, false},
		{"UPDATE orders SET user_id = (SELECT 3) WHERE id = 5", nil, keyAssign{assigned: true}, false},
		{"UPDATE orders SET (user_id, status) = (3, 'x') WHERE id = 5", nil, keyAssign{assigned: true}, false},
		{`UPDATE orders SET "user_id" = 4 WHERE id = 5`, nil, keyAssign{true, true, 4}, false},
		{"UPDATE orders SET amount = user_id WHERE id = 5", nil, keyAssign{}, false},
		{"WITH u AS (UPDATE orders SET user_id = 3 WHERE id = 5 RETURNING id) SELECT * FROM u", nil, keyAssign{true, true, 3}, false},
		{"INSERT INTO orders (id, user_id) VALUES (1, 2) ON CONFLICT (id) DO UPDATE SET user_id = EXCLUDED.user_id", nil, keyAssign{}, true},
		{"INSERT INTO orders (id, user_id) VALUES (1, 2) ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status", nil, keyAssign{}, false},
		{"INSERT INTO orders (id, user_id) VALUES (1, 2) ON DUPLICATE KEY UPDATE status = 'x', user_id = VALUES(user_id)", nil, keyAssign{}, true},
	}
	for _, c := range cases {
		got, up := rawKeyAssign(c.sql, c.vars, match)
		if got != c.want || up != c.upsert {
			t.Errorf("%s: %+v upsert %v, want %+v upsert %v", c.sql, got, up, c.want, c.upsert)
		}
	}
}
