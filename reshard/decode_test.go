package reshard

import (
	"errors"
	"reflect"
	"testing"

	"github.com/freshread/freshread/sharding"
)

func TestParseChange(t *testing.T) {
	cases := []struct {
		in     string
		kind   changeKind
		tables []relName
		oldKey []field
		newTup []field
		xid    uint32
	}{
		{in: "BEGIN", kind: changeOther},
		{in: "BEGIN 1234", kind: changeOther},
		{in: "COMMIT", kind: changeCommit},
		{in: "COMMIT 4294967295", kind: changeCommit, xid: 4294967295},
		{in: "message: transactional: 0 prefix: p, sz: 3 content:a b", kind: changeOther},
		{
			in:     `table public.orders: INSERT: id[bigint]:1 user_id[bigint]:-7 note[text]:'it''s a "test" new-tuple: x' tags[text[]]:null amount[numeric]:NaN ok[boolean]:true b[bit(3)]:B'101' ts[timestamp with time zone]:'2025-01-01 00:00:00+00'`,
			kind:   changeInsert,
			tables: []relName{{"public", "orders"}},
			newTup: []field{
				{name: "id", typ: "bigint", val: "1"},
				{name: "user_id", typ: "bigint", val: "-7"},
				{name: "note", typ: "text", val: `it's a "test" new-tuple: x`},
				{name: "tags", typ: "text[]", null: true},
				{name: "amount", typ: "numeric", val: "NaN"},
				{name: "ok", typ: "boolean", val: "true"},
				{name: "b", typ: "bit(3)", val: "101"},
				{name: "ts", typ: "timestamp with time zone", val: "2025-01-01 00:00:00+00"},
			},
		},
		{
			in:     `table "My Schema"."Odd ""T""": UPDATE: old-key: "Id"[integer]:5 k[text]:'a''' new-tuple: "Id"[integer]:6 k[text]:'' big[text]:unchanged-toast-datum`,
			kind:   changeUpdate,
			tables: []relName{{"My Schema", `Odd "T"`}},
			oldKey: []field{{name: "Id", typ: "integer", val: "5"}, {name: "k", typ: "text", val: "a'"}},
			newTup: []field{{name: "Id", typ: "integer", val: "6"}, {name: "k", typ: "text", val: ""}, {name: "big", typ: "text", toast: true}},
		},
		{
			in:     `table public.orders: UPDATE: id[bigint]:1 v[jsonb]:'{"a": [1, 2]}'`,
			kind:   changeUpdate,
			tables: []relName{{"public", "orders"}},
			newTup: []field{{name: "id", typ: "bigint", val: "1"}, {name: "v", typ: "jsonb", val: `{"a": [1, 2]}`}},
		},
		{
			in:     "table public.orders: DELETE: id[bigint]:9",
			kind:   changeDelete,
			tables: []relName{{"public", "orders"}},
			oldKey: []field{{name: "id", typ: "bigint", val: "9"}},
		},
		{in: "table public.orders: DELETE: (no-tuple-data)", kind: changeDelete, tables: []relName{{"public", "orders"}}},
		{in: "table public.a, s.\"B, c\": TRUNCATE: (no-flags)", kind: changeTruncate, tables: []relName{{"public", "a"}, {"s", "B, c"}}},
		{in: "table public.a: TRUNCATE: restart_seqs cascade", kind: changeTruncate, tables: []relName{{"public", "a"}}},
		{
			in:     "table public.t: INSERT: k[text]:'line1\nline2' w[character varying(5)]:'a]:b'",
			kind:   changeInsert,
			tables: []relName{{"public", "t"}},
			newTup: []field{{name: "k", typ: "text", val: "line1\nline2"}, {name: "w", typ: "character varying(5)", val: "a]:b"}},
		},
	}
	for _, c := range cases {
		got, err := parseChange(c.in)
		if err != nil {
			t.Errorf("parseChange(%q): %v", c.in, err)
			continue
		}
		want := change{kind: c.kind, tables: c.tables, oldKey: c.oldKey, newTuple: c.newTup, xid: c.xid}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("parseChange(%q)\n got %+v\nwant %+v", c.in, got, want)
		}
	}
	for _, bad := range []string{
		"INSERT",
		"COMMIT x",
		"COMMIT 0",
		"COMMIT 4294967296",
		"table orders: INSERT: id[bigint]:1",
		"table public.orders INSERT: id[bigint]:1",
		"table public.orders: MERGE: id[bigint]:1",
		"table public.orders: INSERT: id[bigint]:'unterminated",
		"table public.orders: INSERT: id[bigint:1",
		"table public.orders: UPDATE: old-key: id[bigint]:1",
		`table "public.orders: INSERT: id[bigint]:1`,
	} {
		if _, err := parseChange(bad); !errors.Is(err, ErrDecode) {
			t.Errorf("parseChange(%q) = %v, want ErrDecode", bad, err)
		}
	}
}

func TestKeyOf(t *testing.T) {
	fs := []field{{name: "a", val: "1"}, {name: "b", val: "x"}, {name: "n", null: true}, {name: "t", toast: true}}
	if v, ok := keyOf(fs, []string{"b", "a"}); !ok || !reflect.DeepEqual(v, []string{"x", "1"}) {
		t.Errorf("keyOf = %v %v", v, ok)
	}
	for _, cols := range [][]string{{"n"}, {"t"}, {"missing"}} {
		if _, ok := keyOf(fs, cols); ok {
			t.Errorf("keyOf(%v) ok, want not", cols)
		}
	}
}

func TestBucketRangesAndDiff(t *testing.T) {
	if got := bucketRanges([]int{0, 1, 2, 3, 8, 10, 11}); got != "0-3,8,10-11" {
		t.Errorf("bucketRanges = %q", got)
	}
	from := []string{"a", "a", "a", "a", "b", "b", "b", "b"}
	_, doubled, err := sharding.PlanDoubling(sharding.BucketMap{Owners: from}, []string{"c", "d"})
	if err != nil {
		t.Fatal(err)
	}
	to := doubled.Owners
	if want := []string{"a", "a", "c", "c", "b", "b", "d", "d"}; !reflect.DeepEqual(to, want) {
		t.Errorf("PlanDoubling = %v, want %v", to, want)
	}
	moves, err := Diff(from, to)
	if err != nil {
		t.Fatal(err)
	}
	want := []Move{{Buckets: []int{2, 3}, From: "a", To: "c"}, {Buckets: []int{6, 7}, From: "b", To: "d"}}
	if !reflect.DeepEqual(moves, want) {
		t.Errorf("Diff = %+v, want %+v", moves, want)
	}
	if _, err := Diff(from, to[:4]); !errors.Is(err, ErrConfig) {
		t.Errorf("Diff of maps of different sizes: %v", err)
	}
	if s := slotName("a-b-0-3"); len(s) > 63 || s != slotName("a-b-0-3") || s == slotName("a-b-0-4") {
		t.Errorf("slotName = %q", s)
	}
}

func TestLSN(t *testing.T) {
	l, err := parseLSN("16/B374D848")
	if err != nil || l != walPos(0x16B374D848) || l.String() != "16/B374D848" {
		t.Fatalf("parseLSN = %v %v", l, err)
	}
	if _, err := parseLSN("nope"); err == nil {
		t.Fatal("parseLSN(nope) succeeded")
	}
}
