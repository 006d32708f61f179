package reshard

import (
	"errors"
	"strings"
	"testing"

	"github.com/shopspring/decimal"
)

func TestGTIDPos(t *testing.T) {
	p, err := parseGTIDPos("1-2-9, 0-1-57")
	if err != nil {
		t.Fatal(err)
	}
	if p.String() != "0-1-57,1-2-9" {
		t.Fatalf("String = %q", p.String())
	}
	if e, err := parseGTIDPos(""); err != nil || len(e) != 0 || e.String() != "" {
		t.Fatalf("empty: %v %v", e, err)
	}
	for _, bad := range []string{"0-1", "a-1-2", "0-1-2,0-3-4", "0-1-2-3", "-1-1-1"} {
		if _, err := parseGTIDPos(bad); err == nil {
			t.Errorf("parseGTIDPos(%q) succeeded", bad)
		}
	}
	q, _ := parseGTIDPos("0-3-58,1-2-9,2-1-1")
	if !q.covers(p) || p.covers(q) {
		t.Fatalf("covers: %v, %v", q.covers(p), p.covers(q))
	}
	// Sequence numbers decide, not server ids (a failover keeps counting).
	r, _ := parseGTIDPos("0-9-57,1-2-9")
	if !r.covers(p) || !p.covers(r) {
		t.Fatal("positions with the same sequence numbers do not cover each other")
	}
	c := q.clone()
	c[0] = gtid{1, 1}
	if q[0].seq != 58 {
		t.Fatal("clone shares its map")
	}
}

func TestBinlogCoord(t *testing.T) {
	a := binlogCoord{"mysql-bin.000009", 900}
	b := binlogCoord{"./mysql-bin.000010", 4}
	c := binlogCoord{"mysql-bin.000010", 120}
	for _, x := range []struct {
		x, y binlogCoord
		want bool
	}{{a, b, true}, {b, a, false}, {b, c, true}, {c, b, false}, {c, c, false}} {
		if got, err := x.x.before(x.y); err != nil || got != x.want {
			t.Errorf("%v before %v = %v, %v", x.x, x.y, got, err)
		}
	}
	if _, err := (binlogCoord{"binlog", 4}).before(a); err == nil {
		t.Error("a file name without a number compared")
	}
	if n := bytesAfter(b.packed(), c); n != 116 {
		t.Errorf("bytesAfter in one file = %d", n)
	}
	if n := bytesAfter(a.packed(), c); n != 120 {
		t.Errorf("bytesAfter across files = %d, want the later file's offset", n)
	}
}

func TestBinlogText(t *testing.T) {
	col := func(base, typ string) column { return column{name: "k", base: base, typ: typ} }
	for _, c := range []struct {
		v    any
		c    column
		want string
	}{
		{int64(-5), col("bigint", "bigint(20)"), "-5"},
		{int64(-1), col("bigint", "bigint(20) unsigned"), "18446744073709551615"},
		{int32(-1), col("int", "int(10) unsigned"), "4294967295"},
		{int32(-1), col("mediumint", "mediumint(8) unsigned"), "16777215"},
		{int32(-7), col("mediumint", "mediumint(9)"), "-7"},
		{int16(-1), col("smallint", "smallint(5) unsigned"), "65535"},
		{int8(-1), col("tinyint", "tinyint(3) unsigned"), "255"},
		{int8(-1), col("tinyint", "tinyint(4)"), "-1"},
		{"abc", col("varchar", "varchar(10)"), "abc"},
		{[]byte{0, 0xff}, col("varbinary", "varbinary(4)"), "\x00\xff"},
		{decimal.RequireFromString("12.50"), col("decimal", "decimal(12,2)"), "12.5"},
		{0.1, col("double", "double"), "0.1"},
		{float32(0.1), col("float", "float"), "0.10000000149011612"},
	} {
		got, err := binlogText(c.v, c.c)
		if err != nil || got != c.want {
			t.Errorf("binlogText(%#v, %s) = %q, %v; want %q", c.v, c.c.typ, got, err, c.want)
		}
	}
	if _, err := binlogText(struct{}{}, col("int", "int(11)")); !errors.Is(err, ErrDecode) {
		t.Errorf("an unknown value: %v, want ErrDecode", err)
	}
}

func TestTruncateStatement(t *testing.T) {
	m := &Mover{tables: []*movingTable{
		{src: &tableSide{rel: relName{"shop", "orders"}}},
		{src: &tableSide{rel: relName{"shop", "order_items"}}},
	}}
	f := &mariaFeed{m: m}
	for _, c := range []struct {
		schema, q string
		want      int
	}{
		{"shop", "TRUNCATE TABLE orders", 0},
		{"shop", "truncate order_items", 1},
		{"other", "TRUNCATE TABLE `shop`.`order_items`", 1},
		{"other", "TRUNCATE shop . orders;", 0},
		{"other", "TRUNCATE TABLE orders", -1},
		{"shop", "TRUNCATE TABLE orders_archive", -1},
		{"shop", "DELETE FROM orders", -1},
		{"shop", "/* x */ TRUNCATE TABLE orders", -1}, // a comment first: not recognised
	} {
		if got := f.truncated([]byte(c.schema), []byte(c.q)); got != c.want {
			t.Errorf("truncated(%s, %q) = %d, want %d", c.schema, c.q, got, c.want)
		}
	}
}

func TestMariaKeySQL(t *testing.T) {
	id := column{name: "id", base: "bigint", typ: "bigint(20)"}
	line := column{name: "line", base: "decimal", typ: "decimal(12,2)"}
	side := &tableSide{pk: []column{id, line}}
	v1, v2 := "9007199254740993", "1.50"
	q, args := keyAfterMaria(side, []*string{&v1, &v2})
	want := "`id` >= ? AND (`id` > ? OR (`id` = ? AND `line` > CAST(? AS DECIMAL(12,2))))"
	if q != want {
		t.Fatalf("keyAfterMaria:\n got %s\nwant %s", q, want)
	}
	if len(args) != 4 || args[0] != int64(9007199254740993) || args[1] != int64(9007199254740993) || args[3] != "1.50" {
		t.Fatalf("keyAfterMaria args %#v: the integer must be an int64 (a string compares as a double)", args)
	}
	in, args := keysInMaria(side, [][]*string{{&v1, &v2}, {&v1, nil}})
	if in != "(`id`, `line`) IN ((?, CAST(? AS DECIMAL(12,2))), (?, CAST(? AS DECIMAL(12,2))))" || len(args) != 4 || args[3] != nil {
		t.Fatalf("keysInMaria: %s %#v", in, args)
	}
	if mariaArg(column{base: "int", typ: "int(10) unsigned"}, &v1) != uint64(9007199254740993) {
		t.Fatal("an unsigned key is not a uint64")
	}
	if b, ok := mariaArg(column{base: "varbinary"}, &v2).([]byte); !ok || string(b) != v2 {
		t.Fatal("a binary value is not bytes")
	}
	if !strings.Contains(mariaGuardBody("db", relName{"db", "o'rders"}, "user_id", 8, "upd"), "freshread: o?rders: bucket ") {
		t.Fatal("a quote in a table name reaches the guard's message")
	}
	if n := len(mariaGuardName(relName{"db", strings.Repeat("x", 64)}, "del")); n > 64 {
		t.Fatalf("a trigger name of %d characters", n)
	}
}

// TestMariaTrxEnded: a transaction listed at the fence is open while its
// connection shows a transaction of the same start (to the second) and,
// once it had a real trx_id, of the same ID; a fake ID (nothing written
// yet) may become a real one.
func TestMariaTrxEnded(t *testing.T) {
	const fake = mariaFakeTrxID | 0x7f00
	at := "2025-03-01 12:00:00"
	later := "2025-03-01 12:00:01"
	ro := mariaTrx{thread: 7, started: at, id: fake}
	rw := mariaTrx{thread: 7, started: at, id: 1234}
	xa := mariaTrx{thread: 0, started: at, id: 99}
	cases := []struct {
		name  string
		t     mariaTrx
		now   []mariaTrx
		ended bool
	}{
		{"gone", ro, nil, true},
		{"other connections only", ro, []mariaTrx{{thread: 8, started: at, id: fake}}, true},
		{"same, still reading", ro, []mariaTrx{ro}, false},
		{"same, now written: a real id", ro, []mariaTrx{{thread: 7, started: at, id: 1300}}, false},
		{"a later one of the connection", ro, []mariaTrx{{thread: 7, started: later, id: fake}}, true},
		{"written, same", rw, []mariaTrx{rw}, false},
		{"written, then another in the same second", rw, []mariaTrx{{thread: 7, started: at, id: 1301}}, true},
		{"written, then a reading one in the same second", rw, []mariaTrx{{thread: 7, started: at, id: fake}}, true},
		{"prepared XA without its connection", xa, []mariaTrx{{thread: 0, started: at, id: 98}, xa}, false},
		{"prepared XA committed", xa, []mariaTrx{{thread: 0, started: at, id: 98}}, true},
	}
	for _, c := range cases {
		if got := c.t.ended(c.now); got != c.ended {
			t.Errorf("%s: ended = %v, want %v", c.name, got, c.ended)
		}
	}
}

func TestIsMariaDB(t *testing.T) {
	for v, want := range map[string]bool{
		"10.11.6-MariaDB-0+deb12u1-log": true,
		"11.4.2-MariaDB":                true,
		"8.4.3":                         false,
		"8.0.36-0ubuntu0.22.04.1":       false,
	} {
		if got := isMariaDB(v); got != want {
			t.Errorf("isMariaDB(%q) = %v, want %v", v, got, want)
		}
	}
}
