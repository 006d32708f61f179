package reshard

import (
	"context"
	"fmt"
	"maps"
	"testing"
)

// rowTexts returns each row's text (r::text) of table in buckets on a
// shard, by primary key.
func (e *env) rowTexts(shard, table, key string, buckets []int) map[string]string {
	e.t.Helper()
	rows, err := e.db[shard].Query(fmt.Sprintf(`SELECT (%s)::text, r::text FROM %s r WHERE (user_id %% %d)::int4 = ANY($1)`, key, table, nbTest), int32s(buckets))
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			e.t.Fatal(err)
		}
		out[k] = v
	}
	return out
}

func (e *env) sameRows(a, b string, buckets []int) {
	e.t.Helper()
	if e.maria != nil {
		e.mariaSame(a, b, buckets)
		return
	}
	for _, tk := range [][2]string{{"orders", "id"}, {"order_items", "order_id, line"}} {
		src, dst := e.rowTexts(a, tk[0], tk[1], buckets), e.rowTexts(b, tk[0], tk[1], buckets)
		if !maps.Equal(src, dst) {
			for k, v := range src {
				if dst[k] != v {
					e.t.Errorf("%s %s: %s has\n  %s\n%s has\n  %s", tk[0], k, a, v, b, dst[k])
				}
			}
			for k, v := range dst {
				if _, ok := src[k]; !ok {
					e.t.Errorf("%s %s: only on %s: %s", tk[0], k, b, v)
				}
			}
			e.t.FailNow()
		}
		if len(src) == 0 {
			e.t.Fatalf("%s: no rows to compare", tk[0])
		}
	}
}

// TestTypesExact copies and catches up rows of every column type with
// edge values (numeric scale, NaN and infinities, -0, json spacing and
// duplicate keys, arrays with NULLs, quotes, commas and two dimensions,
// bytea with zero bytes, timestamps with offsets and infinity, intervals,
// text with newlines, backslashes and quotes, empty strings and NULLs),
// then changes them on the source during the catch-up (updates, a primary
// key change, rows moving into and out of the bucket, a delete, a
// TRUNCATE): every row's text is the same on both sides, before and after
// the switch.
func TestTypesExact(t *testing.T) {
	ctx := context.Background()
	owners := []string{"s0", "s0", "s0", "s0", "s1", "s1", "s1", "s1"}
	e := newEnv(t, []string{"s0", "s1"}, owners)
	e.seed(newLedger(), 1, 200)
	const edge = `
INSERT INTO orders (id, user_id, status, amount, price, attrs, raw, tags, blob, created_at, local_at, due, span, flag, uid, counts) VALUES
 (1000001, 9, E'line1\nline2\ttab \\ back''quote "dq" é 🙂', 1.50, 'NaN', '{"b": [1, 2.50, null], "a": "é\"\\n"}', '{"x": 1,  "x": 2}',
  ARRAY['a', NULL, 'it''s', '', 'with,comma', '{brace}', 'quote"', 'NULL'], '\x00ff0a27', '2025-03-01 12:00:00.123456+05:30', '2000-01-01 00:00:00.000001',
  '0044-03-15 BC', '1 year 2 mons -3 days 04:05:06.789', true, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{{1,2},{3,4}}'),
 (1000002, 17, '', 'NaN', 'Infinity', 'null', '[]', '{}', '', 'infinity', '-infinity', 'infinity', '-178000000 years', NULL, NULL, '{}'),
 (1000003, 25, NULL, -0.01, '-0', '{}', '""', ARRAY[NULL]::text[], NULL, '-infinity', 'infinity', '-infinity', '0', false, NULL, ARRAY[NULL]::int[]),
 (1000004, 33, 'x', 9999999999.99, 1e-300, '{"n": 1e400}', ' {"sp": true} ', ARRAY['  lead', 'trail  '], '\x', '1970-01-01 00:00:00+00', '1970-01-01', '2000-02-29', '-1 days +00:00:00.000001', true, '00000000-0000-0000-0000-000000000000', '{-2147483648,2147483647}'),
 (1000005, 41, 'float', 0.30, 0.30000000000000004, '{"a": {"b": {"c": [true, false]}}}', 'null', ARRAY['\\'], '\x5c', '2025-06-30 23:59:59.999999-12', '2025-06-30 23:59:59.999999', '2025-06-30', '1 mon', false, NULL, NULL)`
	if _, err := e.db["s0"].Exec(edge); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db["s0"].Exec(`INSERT INTO order_items (order_id, line, user_id, sku, qty) VALUES (1000001, 1, 9, E'sku \'q\' "d"', -1), (1000001, 2, 9, NULL, NULL)`); err != nil {
		t.Fatal(err)
	}
	m := e.copiedMove(e.config(), Move{Buckets: []int{1}, From: "s0", To: "s1"})
	e.sameRows("s0", "s1", []int{1})
	// Changes to catch up with, as the application makes them.
	for _, s := range []string{
		`UPDATE orders SET status = E'changed\n''again''', price = '-Infinity', attrs = attrs || '{"new": "v\"x"}', tags = tags || ARRAY['ä'] WHERE id = 1000001`,
		`UPDATE orders SET id = 1000011 WHERE id = 1000002`, // a new primary key (old-key in the WAL)
		`UPDATE orders SET user_id = 8 WHERE id = 1000003`,  // leaves bucket 1 (stays on s0)
		`UPDATE orders SET user_id = 49 WHERE id = 16`,      // enters bucket 1 (seeded in bucket 0)
		`DELETE FROM orders WHERE id = 1000004`,             // gone
		`INSERT INTO orders (id, user_id, blob, raw) VALUES (1000006, 57, '\x00', '{ }')`,
		`TRUNCATE order_items`,
		`INSERT INTO order_items (order_id, line, user_id, sku, qty) VALUES (1000001, 3, 9, 'after truncate', 3), (16, 1, 0, 'bucket 0', 1)`,
		`UPDATE orders SET blob = decode(repeat('ab', 100000), 'hex'), status = repeat('long ', 5000) WHERE id = 1000005`, // TOASTed
		`UPDATE orders SET flag = NOT flag WHERE id = 1000005`,                                                            // the TOASTed columns unchanged
	} {
		if _, err := e.db["s0"].Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	rep, err := m.CatchUp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("catch-up: %+v", rep)
	e.sameRows("s0", "s1", []int{1})
	if _, err := m.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Switch(ctx); err != nil {
		t.Fatal(err)
	}
	e.sameRows("s0", "s1", []int{1})
}
