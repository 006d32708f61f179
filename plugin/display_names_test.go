package plugin

import (
	"testing"

	"github.com/freshread/freshread/lsnstore"
)

// Position names are shown as users read them, never as store keys.
func TestDisplayNames(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"products", "products"},
		{lsnstore.KeyName("products", "id", 1), "products id=1"},
		{lsnstore.KeyNameText("orders", "user_id,id", "7,9"), "orders user_id,id=7,9"},
		{lsnstore.UnkeyedName("products"), "products (unkeyed writes)"},
		{lsnstore.UnkeyedColumnName("orders", "user_id"), "orders (writes not keyed by user_id)"},
		{lsnstore.KeyedTable("products"), "products"},
		{lsnstore.SignedKeyedTable("products", "v1:id;"), "products"},
	} {
		if got := displayName(c.name); got != c.want {
			t.Errorf("displayName(%q) = %q, want %q", c.name, got, c.want)
		}
	}
	plain := []string{"a", "b"}
	if got := displayNames(plain); &got[0] != &plain[0] {
		t.Error("displayNames copied names that need no change")
	}
	if displayNames(nil) != nil {
		t.Error("displayNames(nil) is not nil")
	}
}
