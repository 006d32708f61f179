package position

import (
	"fmt"
	"strings"
	"testing"
)

func TestMySQLLastsAndPrefixesBySource(t *testing.T) {
	const a = "3E11FA47-71CA-11E1-9E33-C80AA9429562"
	const b = "b9d1c2a8-0000-11ee-8000-000000000001"
	cases := []struct {
		set          string
		uuid         string
		last, prefix uint64
	}{
		{a + ":1-100", a, 100, 100},
		{a + ":1-5:7-9", a, 9, 5},                 // a gap: applied up to 5 for sure
		{a + ":2-9", a, 9, 0},                     // transaction 1 missing
		{b + ":1-3,\n" + a + ":1-42", a, 42, 42},  // several sources, MySQL's line breaks
		{a + ":tag1:1-50," + a + ":1-3", a, 3, 3}, // tagged GTIDs are another source
		{b + ":1-3", a, 0, 0},
		{"", a, 0, 0},
	}
	for _, c := range cases {
		s, err := ParseMySQLGTIDSet(c.set)
		if err != nil {
			t.Fatalf("parse %q: %v", c.set, err)
		}
		source := strings.ToLower(c.uuid)
		if last := numberOf(s.Lasts(), source); last != c.last {
			t.Errorf("Lasts of %q: %s = %d; want %d", c.set, source, last, c.last)
		}
		if prefix := numberOf(s.Prefixes(), source); prefix != c.prefix {
			t.Errorf("Prefixes of %q: %s = %d; want %d", c.set, source, prefix, c.prefix)
		}
	}
}

func numberOf(sns []SourceNumber, source string) uint64 {
	for _, sn := range sns {
		if sn.Source == source {
			return sn.Number
		}
	}
	return 0
}

func TestMySQLLastsAndPrefixes(t *testing.T) {
	s, err := ParseMySQLGTIDSet("8A94F357-AAB4-11DF-86AB-C80AA9429563:2-9, 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-100:200-300:Batch:1-3")
	if err != nil {
		t.Fatal(err)
	}
	var lasts, prefixes []string
	for _, sn := range s.Lasts() {
		lasts = append(lasts, fmt.Sprintf("%s=%d", sn.Source, sn.Number))
	}
	for _, sn := range s.Prefixes() {
		prefixes = append(prefixes, fmt.Sprintf("%s=%d", sn.Source, sn.Number))
	}
	wantLasts := "3e11fa47-71ca-11e1-9e33-c80aa9429562=300 3e11fa47-71ca-11e1-9e33-c80aa9429562:batch=3 8a94f357-aab4-11df-86ab-c80aa9429563=9"
	wantPrefixes := "3e11fa47-71ca-11e1-9e33-c80aa9429562=100 3e11fa47-71ca-11e1-9e33-c80aa9429562:batch=3"
	if got := strings.Join(lasts, " "); got != wantLasts {
		t.Errorf("Lasts = %s; want %s", got, wantLasts)
	}
	if got := strings.Join(prefixes, " "); got != wantPrefixes {
		t.Errorf("Prefixes = %s; want %s", got, wantPrefixes)
	}
	if n := len(MySQLGTIDSet{}.Lasts()) + len(MySQLGTIDSet{}.Prefixes()); n != 0 {
		t.Errorf("empty set: %d sources", n)
	}
}
