package position

import (
	"errors"
	"strings"
	"testing"
)

func mustMariaDB(t testing.TB, s string) MariaDBGTIDList {
	t.Helper()
	l, err := ParseMariaDBGTIDList(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestParseMariaDBGTIDList(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{" \n", ""},
		{"0-1-1", "0-1-1"},
		{"0-1-100,1-2-50", "0-1-100,1-2-50"},
		// As MariaDB may print several domains: not sorted.
		{"2-3-7,0-1-100,1-2-50", "0-1-100,1-2-50,2-3-7"},
		{"0-1-100, 1-2-50", "0-1-100,1-2-50"},
		{"0-1-100,\n1-2-50\n", "0-1-100,1-2-50"},
		{"00-001-0100", "0-1-100"},
		{"0-0-0", "0-0-0"},
		{"4294967295-4294967295-18446744073709551615", "4294967295-4294967295-18446744073709551615"},
		// Real multi-source / multi-domain positions.
		{"0-101-2320,1-102-88,11-211-5", "0-101-2320,1-102-88,11-211-5"},
		{"100-3306-1849201", "100-3306-1849201"},
	}
	for _, tt := range tests {
		l, err := ParseMariaDBGTIDList(tt.in)
		if err != nil {
			t.Errorf("ParseMariaDBGTIDList(%q): %v", tt.in, err)
			continue
		}
		if got := l.String(); got != tt.want {
			t.Errorf("ParseMariaDBGTIDList(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
		if l.Empty() != (tt.want == "") {
			t.Errorf("ParseMariaDBGTIDList(%q).Empty() = %v", tt.in, l.Empty())
		}
	}
}

func TestParseMariaDBGTIDListMalformed(t *testing.T) {
	tests := []struct{ in, problem string }{
		{"0-1", `entry "0-1" needs domain-server-seq`},
		{"0", `entry "0" needs domain-server-seq`},
		{"0-1-2-3", `entry "0-1-2-3" needs domain-server-seq`},
		{"-1-1-1", "needs domain-server-seq"},
		{"0--1", `entry "0--1": server ID is missing`},
		{"0-1-", `entry "0-1-": sequence number is missing`},
		{"-1-1", `entry "-1-1": domain is missing`},
		{"a-1-1", `domain "a" is not a decimal number`},
		{"0-x-1", `server ID "x" is not a decimal number`},
		{"0-1-1e3", `sequence number "1e3" is not a decimal number`},
		{"0-1-+5", `sequence number "+5" is not a decimal number`},
		{"0-1- 5", `sequence number " 5" is not a decimal number`},
		{"0-1-18446744073709551616", `sequence number "18446744073709551616" exceeds 18446744073709551615`},
		{"0-1-99999999999999999999999", "exceeds 18446744073709551615"},
		{"4294967296-1-1", `domain "4294967296" exceeds 4294967295`},
		{"0-4294967296-1", `server ID "4294967296" exceeds 4294967295`},
		{"0-1-100,0-2-101", "domain 0 appears twice"},
		{"1-1-5,0-1-1,1-1-5", "domain 1 appears twice"},
		{"0-1-100,", "empty entry (stray comma)"},
		{",0-1-100", "empty entry (stray comma)"},
		{"0-1-100,,1-2-50", "empty entry (stray comma)"},
		{"0-1-100, ", "empty entry (stray comma)"},
		{"0-1-100;1-2-50", "needs domain-server-seq"},
		{"0-1-100 1-2-50", "needs domain-server-seq"},
		{"0-1-1 00", `sequence number "1 00" is not a decimal number`},
		{"0:1:100", "needs domain-server-seq"},
	}
	for _, tt := range tests {
		l, err := ParseMariaDBGTIDList(tt.in)
		if err == nil {
			t.Errorf("ParseMariaDBGTIDList(%q) = %q, want an error", tt.in, l)
			continue
		}
		if !errors.Is(err, ErrBadPosition) {
			t.Errorf("ParseMariaDBGTIDList(%q): %v does not wrap ErrBadPosition", tt.in, err)
		}
		prefix := "position: unparseable MariaDB GTID list " + quote(tt.in) + ": "
		if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tt.problem) {
			t.Errorf("ParseMariaDBGTIDList(%q): %q, want %q...%q", tt.in, msg, prefix, tt.problem)
		}
		if !l.Empty() {
			t.Errorf("ParseMariaDBGTIDList(%q) returned %q with its error", tt.in, l)
		}
	}
}

func TestMariaDBGTIDListSeq(t *testing.T) {
	l := mustMariaDB(t, "11-211-5,0-101-2320,1-102-88")
	for _, tt := range []struct {
		domain uint32
		seq    uint64
		ok     bool
	}{{0, 2320, true}, {1, 88, true}, {11, 5, true}, {2, 0, false}, {12, 0, false}, {4294967295, 0, false}} {
		seq, ok := l.Seq(tt.domain)
		if seq != tt.seq || ok != tt.ok {
			t.Errorf("Seq(%d) = %d, %v, want %d, %v", tt.domain, seq, ok, tt.seq, tt.ok)
		}
	}
	if _, ok := (MariaDBGTIDList{}).Seq(0); ok {
		t.Error("the empty list has a domain 0")
	}
}

func TestMariaDBGTIDListHasApplied(t *testing.T) {
	tests := []struct {
		replica, write string
		want           bool
	}{
		{"", "", true},
		{"0-1-100", "", true},
		{"", "0-1-1", false},
		{"0-1-100", "0-1-100", true},
		{"0-1-101", "0-1-100", true},
		{"0-1-99", "0-1-100", false},
		// The server ID does not order GTIDs within a domain.
		{"0-2-100", "0-1-100", true},
		{"0-1-100", "0-2-100", true},
		{"0-1-99", "0-2-100", false},
		// Every domain of the write must be applied.
		{"0-1-100,1-2-50", "0-1-100", true},
		{"0-1-100,1-2-50", "1-2-50", true},
		{"0-1-100,1-2-49", "0-1-90,1-2-50", false},
		{"0-1-100", "0-1-90,1-2-50", false},
		{"1-2-60", "0-1-90,1-2-50", false},
		{"0-1-2320,1-102-88,11-211-5", "0-1-2320,11-211-5", true},
		{"0-1-2320,1-102-88,11-211-4", "0-1-2320,11-211-5", false},
		// A domain the replica lacks is not applied, even at seq 0.
		{"1-1-5", "0-1-0", false},
		{"0-1-0", "0-1-0", true},
		// Sequence numbers compare as numbers, not strings.
		{"0-1-1000", "0-1-999", true},
		{"0-1-18446744073709551615", "0-1-18446744073709551614", true},
	}
	for _, tt := range tests {
		r, w := mustMariaDB(t, tt.replica), mustMariaDB(t, tt.write)
		if got := r.HasApplied(w); got != tt.want {
			t.Errorf("%q.HasApplied(%q) = %v, want %v", tt.replica, tt.write, got, tt.want)
		}
	}
}

func TestMariaDBGTIDListMerge(t *testing.T) {
	tests := []struct{ a, b, want string }{
		{"", "", ""},
		{"0-1-5", "", "0-1-5"},
		{"0-1-100,1-2-50", "0-1-90,1-2-60", "0-1-100,1-2-60"},
		{"0-1-100", "1-2-50,2-3-7", "0-1-100,1-2-50,2-3-7"},
		{"0-1-100,2-3-7", "1-2-50", "0-1-100,1-2-50,2-3-7"},
		{"0-1-100", "0-2-101", "0-2-101"},
		// Equal sequence numbers: the higher server ID, either way round.
		{"0-1-100", "0-2-100", "0-2-100"},
		{"0-2-100", "0-1-100", "0-2-100"},
	}
	for _, tt := range tests {
		a, b := mustMariaDB(t, tt.a), mustMariaDB(t, tt.b)
		if got := a.Merge(b).String(); got != tt.want {
			t.Errorf("%q.Merge(%q) = %q, want %q", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestMariaDBGTIDListEqual(t *testing.T) {
	if !mustMariaDB(t, "1-2-50,0-1-100").Equal(mustMariaDB(t, "0-1-100, 1-2-50")) {
		t.Error("the same list in two orders is not Equal")
	}
	if mustMariaDB(t, "0-1-100").Equal(mustMariaDB(t, "0-2-100")) {
		t.Error("lists with different server IDs are Equal")
	}
	if !mustMariaDB(t, "").Equal(MariaDBGTIDList{}) {
		t.Error("a parsed empty list is not the zero value")
	}
}

func TestMariaDBDomains(t *testing.T) {
	l, err := ParseMariaDBGTIDList("2-1-5, 0-1-100,1-2-50")
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Domains(); len(got) != 3 || got[0] != 0 || got[1] != 1 || got[2] != 2 {
		t.Fatalf("Domains() = %v", got)
	}
	if got := (MariaDBGTIDList{}).Domains(); len(got) != 0 {
		t.Fatalf("empty list: %v", got)
	}
}
