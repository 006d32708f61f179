package lsnstore

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

func mustPos(t testing.TB, s string) Position {
	t.Helper()
	p, err := ParsePosition(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParsePosition(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0/0", "0/0"},
		{"16/b374d848", "16/B374D848"},
		{"0/64+1=0/14", "0/64+1=0/14"},
		{"0/64+2=0/5+1=0/14", "0/64+1=0/14+2=0/5"}, // any order in, sorted out
		{"0/64+1=0/0", "0/64"},                     // zero lanes dropped
		{"0/0+3e11fa47-71ca-11e1-9e33-c80aa9429562=0/64", "0/0+3e11fa47-71ca-11e1-9e33-c80aa9429562=0/64"},
		{"0/0+3e11fa47-71ca-11e1-9e33-c80aa9429562:batch_1=0/3", "0/0+3e11fa47-71ca-11e1-9e33-c80aa9429562:batch_1=0/3"},
	} {
		p, err := ParsePosition(tc.in)
		if err != nil {
			t.Fatalf("ParsePosition(%q): %v", tc.in, err)
		}
		if got := p.String(); got != tc.want {
			t.Errorf("ParsePosition(%q).String() = %q; want %q", tc.in, got, tc.want)
		}
		if q := mustPos(t, p.String()); !q.Equal(p) {
			t.Errorf("%q does not round-trip: %v", tc.in, q)
		}
	}
	for _, bad := range []string{
		"", "0", "/0", "0/", "0/64+", "0/64++1=0/1", "0/64+1", "0/64+=0/1", "0/64+1=", "0/64+1=5",
		"0/64+1=0/1+1=0/2", // a lane twice
		"0/64+a.b=0/1", "0/64+a b=0/1", "0/64+a/b=0/1", "123456789/0", "0/64+1=123456789/0",
		"0/64+" + strings.Repeat("x", MaxLaneName+1) + "=0/1",
	} {
		_, err := ParsePosition(bad)
		if !errors.Is(err, ErrBadPosition) {
			t.Errorf("ParsePosition(%q) error = %v; want ErrBadPosition", bad, err)
		}
	}
}

func TestNewPosition(t *testing.T) {
	p, err := NewPosition(5, Lane{"2", 7}, Lane{"1", 3}, Lane{"2", 9}, Lane{"3", 0})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.String(); got != "0/5+1=0/3+2=0/9" {
		t.Fatalf("NewPosition = %s", got)
	}
	if p.Lane("2") != 9 || p.Lane("3") != 0 || p.Main() != 5 || !p.HasLanes() || len(p.Lanes()) != 2 {
		t.Fatalf("accessors of %v", p)
	}
	if _, err := NewPosition(1, Lane{"a+b", 1}); !errors.Is(err, ErrBadPosition) {
		t.Fatalf("bad lane name: error = %v", err)
	}
	if q, _ := NewPosition(0); !q.IsZero() || q.HasLanes() {
		t.Fatalf("NewPosition(0) = %v", q)
	}
}

func TestPositionOrder(t *testing.T) {
	a := mustPos(t, "0/64+1=0/14")
	b := mustPos(t, "0/C8+1=0/A")
	c := mustPos(t, "0/C8+1=0/14+2=0/1")
	for _, tc := range []struct {
		p, q Position
		want bool
	}{
		{a, a, true}, {a, b, false}, {b, a, false}, {c, a, true}, {c, b, true}, {a, c, false},
		{a, Position{}, true}, {Position{}, a, false}, {PositionOf(0xC8), b, false}, {b, PositionOf(0xC8), true},
	} {
		if got := tc.p.Covers(tc.q); got != tc.want {
			t.Errorf("%v.Covers(%v) = %v; want %v", tc.p, tc.q, got, tc.want)
		}
	}
	if got := a.Merge(b).String(); got != "0/C8+1=0/14" {
		t.Errorf("Merge = %s", got)
	}
	if got := a.Min(b).String(); got != "0/64+1=0/A" {
		t.Errorf("Min = %s", got)
	}
	if got := c.Min(a).String(); got != "0/64+1=0/14" {
		t.Errorf("Min = %s", got)
	}
	if got := b.Lag(a); got != 0xA {
		t.Errorf("Lag = %d", got)
	}
	if got := a.Lag(a); got != 0 {
		t.Errorf("Lag of itself = %d", got)
	}
}

// randomPosition draws a position over a few lanes, often with a zero lane.
func randomPosition(rng *rand.Rand) Position {
	var ls []Lane
	for _, name := range []string{"1", "2", "x:tag"} {
		if rng.IntN(3) > 0 {
			ls = append(ls, Lane{Name: name, Value: LSN(rng.IntN(4))})
		}
	}
	p, _ := NewPosition(LSN(rng.IntN(4)), ls...)
	return p
}

// TestPositionLattice checks the laws the store and the routing rule rely
// on: Merge is the least upper bound and Min the greatest lower bound of
// the Covers order.
func TestPositionLattice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		p, q, r := randomPosition(rng), randomPosition(rng), randomPosition(rng)
		m := p.Merge(q)
		if !m.Covers(p) || !m.Covers(q) {
			t.Fatalf("%v.Merge(%v) = %v does not cover both", p, q, m)
		}
		if r.Covers(p) && r.Covers(q) && !r.Covers(m) {
			t.Fatalf("%v covers %v and %v but not their merge %v", r, p, q, m)
		}
		if !m.Equal(q.Merge(p)) {
			t.Fatalf("Merge is not commutative: %v, %v", p, q)
		}
		n := p.Min(q)
		if !p.Covers(n) || !q.Covers(n) {
			t.Fatalf("%v.Min(%v) = %v is not below both", p, q, n)
		}
		if p.Covers(r) && q.Covers(r) && !n.Covers(r) {
			t.Fatalf("%v and %v cover %v but their Min %v does not", p, q, r, n)
		}
		if (p.Lag(q) == 0) != p.Covers(q) {
			t.Fatalf("%v.Lag(%v) = %d, Covers = %v", p, q, p.Lag(q), p.Covers(q))
		}
		if back := mustPos(t, m.String()); !back.Equal(m) {
			t.Fatalf("%v does not round-trip", m)
		}
	}
}

func TestPositionNoAllocWithoutLanes(t *testing.T) {
	a, b := PositionOf(5), PositionOf(7)
	la := mustPos(t, "0/5+1=0/3")
	n := testing.AllocsPerRun(100, func() {
		_ = a.Merge(b).Covers(a)
		_ = la.Merge(a) // a has no lanes: la's are reused
		_, _ = parsePosition("16/B374D848")
	})
	if n != 0 {
		t.Fatalf("allocations: %v", n)
	}
}

func FuzzParsePosition(f *testing.F) {
	for _, s := range []string{"0/0", "0/64+1=0/14", "0/0+3e11fa47-71ca-11e1-9e33-c80aa9429562:t=0/3", "0/64+"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePosition(s)
		if err != nil {
			return
		}
		q, err := ParsePosition(p.String())
		if err != nil || !q.Equal(p) {
			t.Fatalf("%q -> %v does not round-trip: %v, %v", s, p, q, err)
		}
		if !p.Covers(p) || !p.Merge(p).Equal(p) || !p.Min(p).Equal(p) {
			t.Fatalf("%v: not reflexive", p)
		}
	})
}
