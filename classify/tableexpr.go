package classify

import "strings"

// TableExprName returns the table a GORM table expression names, as
// written (quoted or qualified): `orders`, `"public"."orders"`, `orders o`
// and `orders AS o` name orders. Anything else (a join or a subquery
// written by hand, a list of tables) names no single table: ok is false.
// GORM sets Statement.Table to the alias of such an expression, which
// names no table.
func TableExprName(sql string) (name string, ok bool) {
	if strings.ContainsAny(sql, "(),;") {
		return "", false
	}
	fields := strings.Fields(sql)
	switch len(fields) {
	case 1, 2:
	case 3:
		if !strings.EqualFold(fields[1], "as") {
			return "", false
		}
	default:
		return "", false
	}
	return fields[0], true
}
