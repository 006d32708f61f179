package position

import (
	"errors"
	"strings"
	"testing"
)

const (
	uuidA = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	uuidB = "8a94f357-aab4-11df-86ab-c80aa9429563"
	uuidC = "e6a1c1b4-1f5b-11ef-9a5b-0242ac120002"
)

func mustMySQL(t testing.TB, s string) MySQLGTIDSet {
	t.Helper()
	g, err := ParseMySQLGTIDSet(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestParseMySQLGTIDSet(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"empty", "", ""},
		{"blank", " \n\t", ""},
		{"single", uuidA + ":7", uuidA + ":7"},
		{"range", uuidA + ":1-100", uuidA + ":1-100"},
		{"gaps", uuidA + ":1-100:200-300:305", uuidA + ":1-100:200-300:305"},
		{"singleton range", uuidA + ":7-7", uuidA + ":7"},
		{"uppercase UUID", strings.ToUpper(uuidA) + ":1-5", uuidA + ":1-5"},
		{"mixed case UUID", "3E11FA47-71ca-11E1-9e33-C80AA9429562:1-5", uuidA + ":1-5"},
		{"several sources sorted", uuidC + ":1-3," + uuidA + ":1-5," + uuidB + ":9",
			uuidA + ":1-5," + uuidB + ":9," + uuidC + ":1-3"},
		// As SELECT @@GLOBAL.gtid_executed prints it.
		{"newlines", uuidA + ":1-100:200-300,\n" + uuidB + ":1-5,\n" + uuidC + ":1-2",
			uuidA + ":1-100:200-300," + uuidB + ":1-5," + uuidC + ":1-2"},
		{"CRLF and spaces", " " + uuidA + ":1-2 ,\r\n " + uuidB + ":3\n", uuidA + ":1-2," + uuidB + ":3"},
		{"unsorted ranges", uuidA + ":200-300:1-100", uuidA + ":1-100:200-300"},
		{"adjacent merged", uuidA + ":1-5:6-10:11", uuidA + ":1-11"},
		{"overlapping merged", uuidA + ":1-50:20-100:90-95", uuidA + ":1-100"},
		{"contained", uuidA + ":1-100:5-6", uuidA + ":1-100"},
		{"source twice", uuidA + ":1-5," + uuidB + ":1," + uuidA + ":6-9:20", uuidA + ":1-9:20," + uuidB + ":1"},
		{"leading zeros", uuidA + ":001-010", uuidA + ":1-10"},
		{"max GNO", uuidA + ":9223372036854775806-9223372036854775807", uuidA + ":9223372036854775806-9223372036854775807"},
		// Tagged GTIDs (MySQL 8.3+), as MySQL prints them and as users write them.
		{"tagged", uuidA + ":batch:1-5", uuidA + ":batch:1-5"},
		{"tagged after untagged", uuidA + ":1-4:aaaa:1", uuidA + ":1-4:aaaa:1"},
		{"tags sorted, lower case", uuidA + ":Domain_2:8-52," + uuidA + ":Domain_1:1-3:15-21",
			uuidA + ":domain_1:1-3:15-21:domain_2:8-52"},
		{"MySQL tagged output",
			"896e7882-18fe-11ef-ab88-22222d34d411:1-4:aaaa:1:abc:1-3:bbbbb:1:bbbbbb:1:x:1,896e7882-18fe-11ef-ab88-22222d34d412:1-2",
			"896e7882-18fe-11ef-ab88-22222d34d411:1-4:aaaa:1:abc:1-3:bbbbb:1:bbbbbb:1:x:1,896e7882-18fe-11ef-ab88-22222d34d412:1-2"},
		{"untagged after tagged source", uuidA + ":t1:5," + uuidA + ":1-3", uuidA + ":1-3:t1:5"},
		{"tag case merged", uuidA + ":TAG:1-3:tag:4", uuidA + ":tag:1-4"},
		{"underscore tag", uuidA + ":_x9:1", uuidA + ":_x9:1"},
		{"32-byte tag", uuidA + ":" + strings.Repeat("t", 32) + ":1", uuidA + ":" + strings.Repeat("t", 32) + ":1"},
		{"tagged and untagged numbers independent", uuidA + ":1-3:t:1-3", uuidA + ":1-3:t:1-3"},
	}
	for _, tt := range tests {
		g, err := ParseMySQLGTIDSet(tt.in)
		if err != nil {
			t.Errorf("%s: ParseMySQLGTIDSet(%q): %v", tt.name, tt.in, err)
			continue
		}
		if got := g.String(); got != tt.want {
			t.Errorf("%s: ParseMySQLGTIDSet(%q).String() = %q, want %q", tt.name, tt.in, got, tt.want)
		}
		if g.Empty() != (tt.want == "") {
			t.Errorf("%s: Empty() = %v", tt.name, g.Empty())
		}
	}
}

func TestParseMySQLGTIDSetMalformed(t *testing.T) {
	tests := []struct{ in, problem string }{
		{uuidA, `entry "` + uuidA + `" needs uuid:range`},
		{uuidA + ":", "has an empty part"},
		{uuidA + ":1-5:", "has an empty part"},
		{uuidA + "::1-5", "has an empty part"},
		{":1-5", `"" is not a UUID`},
		{"3e11fa47-71ca-11e1-9e33:1-5", `"3e11fa47-71ca-11e1-9e33" is not a UUID`},
		{"3e11fa4771ca11e19e33c80aa9429562:1-5", "is not a UUID"},
		{"3e11fa47-71ca-11e1-9e33-c80aa942956g:1-5", "is not a UUID"},
		{"{3e11fa47-71ca-11e1-9e33-c80aa9429562}:1-5", "is not a UUID"},
		{"3e11fa47_71ca-11e1-9e33-c80aa9429562:1-5", "is not a UUID"},
		{uuidA + ":0", `range "0" starts at 0 (GTID numbers start at 1)`},
		{uuidA + ":0-5", `range "0-5" starts at 0`},
		{uuidA + ":10-5", `range "10-5" ends before it starts`},
		{uuidA + ":1-", "range end is missing"},
		{uuidA + ":-5", `"-5" is neither a range nor a tag`},
		{uuidA + ":1-2-3", `range end "2-3" is not a decimal number`},
		{uuidA + ":1x", `range start "1x" is not a decimal number`},
		{uuidA + ":1 -5", `range start "1 " is not a decimal number`},
		{uuidA + ":18446744073709551616", `range start "18446744073709551616" exceeds 9223372036854775807`},
		{uuidA + ":1-18446744073709551615", `range end "18446744073709551615" exceeds 9223372036854775807`},
		{uuidA + ":9223372036854775808", "exceeds 9223372036854775807"},
		{uuidA + ":1-5,", "empty entry (stray comma)"},
		{uuidA + ":1-5,\n", "empty entry (stray comma)"},
		{"," + uuidA + ":1-5", "empty entry (stray comma)"},
		{uuidA + ":1-5,," + uuidB + ":1", "empty entry (stray comma)"},
		{uuidA + ":tag", `tag "tag" has no range`},
		{uuidA + ":t1:t2:5", `tag "t1" has no range`},
		{uuidA + ":1:t1", `tag "t1" has no range`},
		{uuidA + ":9tag:1", `range start "9tag" is not a decimal number`},
		{uuidA + ":ta-g:1", `"ta-g" is neither a range nor a tag`},
		{uuidA + ":" + strings.Repeat("t", 33) + ":1", "is neither a range nor a tag"},
		{uuidA + ":1-5 " + uuidB + ":1", "is not a decimal number"},
		{uuidA + ":1-5;" + uuidB + ":1", "is not a decimal number"},
	}
	for _, tt := range tests {
		g, err := ParseMySQLGTIDSet(tt.in)
		if err == nil {
			t.Errorf("ParseMySQLGTIDSet(%q) = %q, want an error", tt.in, g)
			continue
		}
		if !errors.Is(err, ErrBadPosition) {
			t.Errorf("ParseMySQLGTIDSet(%q): %v does not wrap ErrBadPosition", tt.in, err)
		}
		prefix := "position: unparseable MySQL GTID set " + quote(tt.in) + ": "
		if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tt.problem) {
			t.Errorf("ParseMySQLGTIDSet(%q): %q, want %q...%q", tt.in, msg, prefix, tt.problem)
		}
		if !g.Empty() {
			t.Errorf("ParseMySQLGTIDSet(%q) returned %q with its error", tt.in, g)
		}
	}
}

func TestMySQLGTIDSetContains(t *testing.T) {
	tests := []struct {
		replica, write string
		want           bool
	}{
		{"", "", true},
		{uuidA + ":1-5", "", true},
		{"", uuidA + ":1", false},
		{uuidA + ":1-100", uuidA + ":1-100", true},
		{uuidA + ":1-100", uuidA + ":100", true},
		{uuidA + ":1-100", uuidA + ":101", false},
		{uuidA + ":1-100", uuidA + ":50-101", false},
		{uuidA + ":1-100:200-300", uuidA + ":150", false},
		{uuidA + ":1-100:200-300", uuidA + ":1-50:250", true},
		{uuidA + ":1-100:200-300", uuidA + ":90-210", false},
		{uuidA + ":1-100:200-300", uuidA + ":201-300:2", true},
		// A gap on the replica is never "behind" in a total order: the write's
		// number must be in the set.
		{uuidA + ":1-10:12-1000", uuidA + ":11", false},
		{uuidA + ":1-100", strings.ToUpper(uuidA) + ":3", true},
		{uuidA + ":1-100", uuidB + ":1", false},
		{uuidA + ":1-100,\n" + uuidB + ":1-5", uuidB + ":5," + uuidA + ":7", true},
		{uuidA + ":1-100,\n" + uuidB + ":1-5", uuidB + ":6," + uuidA + ":7", false},
		{uuidA + ":1-100," + uuidC + ":1-3", uuidB + ":1," + uuidC + ":2", false},
		// Tags are part of the source: tagged and untagged numbers are unrelated.
		{uuidA + ":1-100", uuidA + ":batch:1", false},
		{uuidA + ":batch:1-100", uuidA + ":1", false},
		{uuidA + ":1-100:batch:1-5", uuidA + ":batch:5:3", true},
		{uuidA + ":1-100:batch:1-5", uuidA + ":BATCH:5," + uuidA + ":99", true},
		{uuidA + ":a:1-5:b:1-5", uuidA + ":a:6", false},
	}
	for _, tt := range tests {
		r, w := mustMySQL(t, tt.replica), mustMySQL(t, tt.write)
		if got := r.Contains(w); got != tt.want {
			t.Errorf("%q.Contains(%q) = %v, want %v", tt.replica, tt.write, got, tt.want)
		}
	}
}

func TestMySQLGTIDSetUnion(t *testing.T) {
	tests := []struct{ a, b, want string }{
		{"", "", ""},
		{uuidA + ":1-5", "", uuidA + ":1-5"},
		{uuidA + ":1-5", uuidA + ":6-9", uuidA + ":1-9"},
		{uuidA + ":1-5", uuidA + ":7", uuidA + ":1-5:7"},
		{uuidA + ":1-5:10-20", uuidA + ":3-12", uuidA + ":1-20"},
		{uuidA + ":1-5:10-20:30", uuidA + ":6-9:25", uuidA + ":1-20:25:30"},
		{uuidB + ":1-5", uuidA + ":1", uuidA + ":1," + uuidB + ":1-5"},
		{uuidA + ":1-5," + uuidC + ":2", uuidB + ":1," + uuidC + ":1", uuidA + ":1-5," + uuidB + ":1," + uuidC + ":1-2"},
		{uuidA + ":1-5", uuidA + ":t:1-5", uuidA + ":1-5:t:1-5"},
		{uuidA + ":t:1-5", uuidA + ":t:6:s:1", uuidA + ":s:1:t:1-6"},
	}
	for _, tt := range tests {
		a, b := mustMySQL(t, tt.a), mustMySQL(t, tt.b)
		if got := a.Union(b).String(); got != tt.want {
			t.Errorf("%q.Union(%q) = %q, want %q", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestMySQLGTIDSetUnionDoesNotAlias(t *testing.T) {
	a := mustMySQL(t, uuidA+":1-5:10")
	b := mustMySQL(t, uuidA+":6-9")
	_ = a.Union(b)
	_ = b.Union(a)
	if a.String() != uuidA+":1-5:10" || b.String() != uuidA+":6-9" {
		t.Errorf("Union changed its operands: %q, %q", a, b)
	}
}

func TestMySQLGTIDSetEqual(t *testing.T) {
	if !mustMySQL(t, uuidB+":1-5,\n"+strings.ToUpper(uuidA)+":3:1-2").Equal(mustMySQL(t, uuidA+":1-3,"+uuidB+":1-5")) {
		t.Error("the same set written two ways is not Equal")
	}
	if mustMySQL(t, uuidA+":1-3").Equal(mustMySQL(t, uuidA+":t:1-3")) {
		t.Error("tagged and untagged sets are Equal")
	}
	if !mustMySQL(t, "").Equal(MySQLGTIDSet{}) {
		t.Error("a parsed empty set is not the zero value")
	}
}
