package position

import (
	"errors"
	"testing"
)

// maxErrorLen bounds error messages whatever the input: three quoted
// fragments of at most maxEcho bytes (four bytes each when escaped) and text.
const maxErrorLen = 3*(4*maxEcho+24) + 200

func FuzzParseMariaDBGTIDList(f *testing.F) {
	for _, s := range mariadbSamples {
		f.Add(s)
	}
	for _, s := range []string{"0-1", "0-1-100,", "0-1-100,0-2-5", "0-1-18446744073709551616", " 1-2-3 ,\n 0-1-1", "a-b-c", "--", ","} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseMariaDBGTIDList(s)
		if err != nil {
			if !errors.Is(err, ErrBadPosition) || len(err.Error()) > maxErrorLen || !l.Empty() {
				t.Fatalf("ParseMariaDBGTIDList(%q): bad error %v or value %q", s, err, l)
			}
			return
		}
		text := l.String()
		again, err := ParseMariaDBGTIDList(text)
		if err != nil || !again.Equal(l) || again.String() != text {
			t.Fatalf("%q parsed to %q, which re-parses to %q, %v", s, text, again, err)
		}
		if !l.HasApplied(l) || !l.Merge(l).Equal(l) || !l.Merge(MariaDBGTIDList{}).Equal(l) {
			t.Fatalf("%q: HasApplied not reflexive or Merge not idempotent", text)
		}
	})
}

func FuzzParseMySQLGTIDSet(f *testing.F) {
	for _, s := range mysqlSamples {
		f.Add(s)
	}
	for _, s := range []string{
		uuidA, uuidA + ":0", uuidA + ":5-1", uuidA + ":1-5,", uuidA + ":t", uuidA + ":t:1:u:2-3:1",
		uuidA + ":18446744073709551616", "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-3:5,\n" + uuidB + ":1",
		uuidA + ":1-9223372036854775807", uuidA + "::1", ",",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ParseMySQLGTIDSet(s)
		if err != nil {
			if !errors.Is(err, ErrBadPosition) || len(err.Error()) > maxErrorLen || !g.Empty() {
				t.Fatalf("ParseMySQLGTIDSet(%q): bad error %v or value %q", s, err, g)
			}
			return
		}
		text := g.String()
		again, err := ParseMySQLGTIDSet(text)
		if err != nil || !again.Equal(g) || again.String() != text {
			t.Fatalf("%q parsed to %q, which re-parses to %q, %v", s, text, again, err)
		}
		if !g.Contains(g) || !g.Union(g).Equal(g) || !g.Union(MySQLGTIDSet{}).Equal(g) {
			t.Fatalf("%q: Contains not reflexive or Union not idempotent", text)
		}
	})
}
