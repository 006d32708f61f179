package sharding

import "testing"

// Values travel to the ranking shard as one array literal: quotes and
// backslashes are escaped, braces and commas stay inside the quotes.
func TestTextArrayLiteral(t *testing.T) {
	got := textArray([]string{`a"b`, `c\d`, "{x,y}", "", "é "})
	want := `{"a\"b","c\\d","{x,y}","","é "}`
	if got != want {
		t.Fatalf("textArray = %s, want %s", got, want)
	}
	if got := textArray(nil); got != "{}" {
		t.Fatalf("textArray(nil) = %s, want {}", got)
	}
}
