package classify

import "testing"

func TestTableExprName(t *testing.T) {
	for sql, want := range map[string]string{
		"orders":                   "orders",
		`"public"."orders"`:        `"public"."orders"`,
		"orders o":                 "orders",
		"orders AS o":              "orders",
		" orders  as  o ":          "orders",
		"orders o JOIN items i":    "",
		"orders, items":            "",
		"(SELECT * FROM orders) o": "",
		"orders o WHERE o.id = 1":  "",
		"":                         "",
	} {
		got, ok := TableExprName(sql)
		if got != want || ok != (want != "") {
			t.Errorf("TableExprName(%q) = %q, %v; want %q", sql, got, ok, want)
		}
	}
}
