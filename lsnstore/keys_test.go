package lsnstore

import (
	"slices"
	"testing"
)

func TestRaiseNames(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{nil, nil},
		{[]string{"t"}, []string{"t", "t#u"}},
		{[]string{KeyedTable("t"), KeyName("t", "id", 7)}, []string{"t", "t#k:id=7"}},
		{[]string{Schema}, []string{Schema}},
		{[]string{UnkeyedName("t"), "u"}, []string{"t#u", "u", "u#u"}},
	} {
		if got := raiseNames(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("raiseNames(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestTableKeyEscapesHash: a table whose name holds '#' is never taken
// for a keyed position's name.
func TestTableKeyEscapesHash(t *testing.T) {
	for in, want := range map[string]string{"a#k": "a%23k", "A#U": "a%23u", `"x#k:id=1"`: "x%23k:id=1", "plain": "plain"} {
		if got := TableKey(in); got != want {
			t.Errorf("TableKey(%q) = %q, want %q", in, got, want)
		}
	}
}
