package lsnstore

import (
	"reflect"
	"testing"
)

func TestTableKey(t *testing.T) {
	for in, want := range map[string]string{
		"orders": "orders", "Orders": "orders", `"public"."Orders"`: "orders",
		"sales.orders": "orders", "`orders`": "orders", " orders ": "orders",
	} {
		if got := TableKey(in); got != want {
			t.Errorf("TableKey(%q) = %q, want %q", in, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { TableKey("orders") }); n != 0 {
		t.Errorf("TableKey allocates %v times on a plain name", n)
	}
}

func TestCloseGraph(t *testing.T) {
	got := CloseGraph(map[string][]string{
		"a":      {"b"},
		"b":      {"c", "a"}, // a cycle back to a
		"other":  {"d", "*"},
		"unused": nil,
		"self":   {"self", "e"}, // writes other rows of itself
	})
	want := map[string][]string{"a": {"b", "c"}, "b": {"a", "c"}, "other": {"*", "d"}, "self": {"e", "self"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("CloseGraph = %v, want %v", got, want)
	}
}
