package position

import (
	"errors"
	"testing"
)

func TestMySQLLastAndPrefix(t *testing.T) {
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
		last, err := s.Last(c.uuid)
		if err != nil || last != c.last {
			t.Errorf("Last(%q) of %q = %d, %v; want %d", c.uuid, c.set, last, err, c.last)
		}
		prefix, err := s.Prefix(c.uuid)
		if err != nil || prefix != c.prefix {
			t.Errorf("Prefix(%q) of %q = %d, %v; want %d", c.uuid, c.set, prefix, err, c.prefix)
		}
	}
	if _, err := (MySQLGTIDSet{}).Last("not-a-uuid"); !errors.Is(err, ErrBadPosition) {
		t.Errorf("bad UUID: %v", err)
	}
}
