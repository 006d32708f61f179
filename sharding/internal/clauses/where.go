package clauses

import (
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// AndWhere ANDs conditions to the statement's WHERE (the existing
// conditions parenthesized, whatever ORs they hold).
func AndWhere(st *gorm.Statement, conds ...clause.Expression) {
	exprs := make([]clause.Expression, 0, 1+len(conds))
	if c, ok := st.Clauses["WHERE"]; ok {
		if w, ok := c.Expression.(clause.Where); ok && len(w.Exprs) > 0 {
			exprs = append(exprs, clause.Expr{SQL: "(?)", Vars: []any{clause.AndConditions{Exprs: w.Exprs}}})
		}
	}
	exprs = append(exprs, conds...)
	st.Clauses["WHERE"] = clause.Clause{Name: "WHERE", Expression: clause.Where{Exprs: exprs}}
}
