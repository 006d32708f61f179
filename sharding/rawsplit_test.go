package sharding

import (
	"reflect"
	"testing"
)

// The raw statement's text and variables per shard (Mod(4): user k on
// shard k%4; IDs on shard id%4).
func TestRawSplit(t *testing.T) {
	s := &Sharding{cfg: Config{Algorithm: Mod(4)}}
	pl := placer{rt: &routing{shards: 4, bucketShard: []uint8{0, 1, 2, 3}, owning: 0xf}}
	cases := []struct {
		sql   string
		vars  []any
		parts map[int]rawPart // nil: not split
	}{
		{"SELECT * FROM orders WHERE user_id IN ($1,$2,$3) AND status = $4", []any{1, 2, 5, "x"}, map[int]rawPart{
			1: {"SELECT * FROM orders WHERE user_id IN ($1, $2) AND status = $3", []any{1, 5, "x"}},
			2: {"SELECT * FROM orders WHERE user_id IN ($1) AND status = $2", []any{2, "x"}},
		}},
		{"UPDATE orders SET status = $1 WHERE status = $2 AND user_id IN (4, 7, 8) RETURNING id", []any{"a", "b"}, map[int]rawPart{
			0: {"UPDATE orders SET status = $1 WHERE status = $2 AND user_id IN (4, 8) RETURNING id", []any{"a", "b"}},
			3: {"UPDATE orders SET status = $1 WHERE status = $2 AND user_id IN (7) RETURNING id", []any{"a", "b"}},
		}},
		{"SELECT * FROM orders WHERE user_id = ANY($1) AND amount > $2", []any{[]int64{1, 2, 6}, 3}, map[int]rawPart{
			1: {"SELECT * FROM orders WHERE user_id = ANY($1) AND amount > $2", []any{[]int64{1}, 3}},
			2: {"SELECT * FROM orders WHERE user_id = ANY($1) AND amount > $2", []any{[]int64{2, 6}, 3}},
		}},
		{"DELETE FROM orders WHERE id = ANY(ARRAY[$1, 9, $2])", []any{int64(4), int64(8)}, map[int]rawPart{
			0: {"DELETE FROM orders WHERE id = ANY(ARRAY[$1, $2])", []any{int64(4), int64(8)}},
			1: {"DELETE FROM orders WHERE id = ANY(ARRAY[9])", []any{}},
		}},
		// Not split: an OR at the top, a parameter used twice, "?" placeholders.
		{"SELECT * FROM orders WHERE user_id IN ($1, $2) OR status = 'x'", []any{1, 2}, nil},
		{"SELECT * FROM orders WHERE user_id IN ($1, $2) AND amount <> $1", []any{1, 2}, nil},
		{"SELECT * FROM orders WHERE user_id IN (?, ?)", []any{1, 2}, nil},
	}
	for _, c := range cases {
		match := testMatcher()
		cond := rawWhere(c.sql, c.vars, match)
		ids := map[int64]int{}
		for _, id := range collectIDs(cond, nil) {
			ids[id] = int(id % 4)
		}
		tg := &target{pl: pl}
		s.planRawSplit(tg, cond, c.sql, c.vars, ids)
		if c.parts == nil {
			if tg.rawParts != nil {
				t.Errorf("%s: split %v, want none", c.sql, tg.rawParts)
			}
			continue
		}
		if len(tg.rawParts) != len(c.parts) {
			t.Errorf("%s: %d parts %v, want %v", c.sql, len(tg.rawParts), tg.rawParts, c.parts)
			continue
		}
		for si, want := range c.parts {
			got := tg.rawParts[si]
			if got.sql != want.sql || !reflect.DeepEqual(append([]any{}, got.vars...), want.vars) {
				t.Errorf("%s, shard %d:\n got %q %v\nwant %q %v", c.sql, si, got.sql, got.vars, want.sql, want.vars)
			}
		}
	}
}
