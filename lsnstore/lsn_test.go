package lsnstore

import (
	"errors"
	"math"
	"testing"
)

func TestParseLSNRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want LSN
		out  string
	}{
		{"0/0", 0, "0/0"},
		{"16/B374D848", 0x16_B374D848, "16/B374D848"},
		{"16/b374d848", 0x16_B374D848, "16/B374D848"},
		{"00000016/0000000A", 0x16_0000000A, "16/A"},
		{"1/0", 1 << 32, "1/0"},
		{"0/FFFFFFFF", math.MaxUint32, "0/FFFFFFFF"},
		{"FFFFFFFF/FFFFFFFF", math.MaxUint64, "FFFFFFFF/FFFFFFFF"},
	} {
		got, err := ParseLSN(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseLSN(%q) = %#x, %v; want %#x", tc.in, uint64(got), err, uint64(tc.want))
			continue
		}
		if s := got.String(); s != tc.out {
			t.Errorf("ParseLSN(%q).String() = %q; want %q", tc.in, s, tc.out)
		}
		if back, err := ParseLSN(got.String()); err != nil || back != got {
			t.Errorf("round trip of %q: %v, %v", tc.in, back, err)
		}
	}
}

func TestLSNStringOrder(t *testing.T) {
	// Numeric order, not text order: "10/0" > "F/FFFFFFFF".
	a, _ := ParseLSN("F/FFFFFFFF")
	b, _ := ParseLSN("10/0")
	if !(a < b) {
		t.Fatalf("%v >= %v", a, b)
	}
}

func TestParseLSNMalformed(t *testing.T) {
	for _, in := range []string{
		"", "1", "1/", "/1", "/", "g/1", "1/g", "1/2/3", "1//2",
		"123456789/0", "0/123456789", " 1/2", "1/2 ", "1 /2", "1/ 2", "\t1/2", "1/2\n",
		"-1/2", "+1/2", "0x1/2", "1/2\x00", "１/2",
	} {
		l, err := ParseLSN(in)
		if err == nil {
			t.Errorf("ParseLSN(%q) = %v, nil; want an error", in, l)
			continue
		}
		if !errors.Is(err, ErrBadPosition) {
			t.Errorf("ParseLSN(%q) error %v does not wrap ErrBadPosition", in, err)
		}
	}
	_, err := ParseLSN("zz")
	if want := `lsnstore: unparseable position "zz"`; err == nil || err.Error() != want {
		t.Errorf("ParseLSN(%q) error = %v; want %s", "zz", err, want)
	}
}

func TestParseLSNAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { parseLSN("16/B374D848") }); n != 0 {
		t.Errorf("parseLSN allocates %v times", n)
	}
}

func FuzzParseLSN(f *testing.F) {
	for _, s := range []string{"0/0", "16/B374D848", "1/2/3", "FFFFFFFF/FFFFFFFF"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLSN(s)
		if err != nil {
			return
		}
		back, err := ParseLSN(l.String())
		if err != nil || back != l {
			t.Fatalf("%q -> %v -> %v, %v", s, l, back, err)
		}
	})
}
