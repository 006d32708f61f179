package merge

import (
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// The plan writes the SQL it adds to a shard's statement (the rewritten
// select list, hidden ORDER BY and GROUP BY columns, the deep paging
// predicates) with PostgreSQL's double-quoted identifiers. MySQL and
// MariaDB read a double-quoted name as a string (unless ANSI_QUOTES):
// `GROUP BY status` with a hidden `"status" AS "__fr_g0"` then sends every
// group the same key, and the merge folds them into one. dialectSQL
// rewrites those identifiers with backticks there.

// mysqlDialect reports whether st is written for MySQL or MariaDB.
func mysqlDialect(st *gorm.Statement) bool {
	return st != nil && st.DB != nil && st.Dialector != nil && st.Dialector.Name() == "mysql"
}

// dialectSQL returns sql with its double-quoted identifiers quoted for
// st's dialect (backticks on MySQL and MariaDB); string literals and
// backticked names are kept as they are.
func dialectSQL(st *gorm.Statement, sql string) string {
	if !mysqlDialect(st) || !strings.Contains(sql, `"`) {
		return sql
	}
	var b strings.Builder
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch c {
		case '\'', '`':
			j := i + 1
			for j < len(sql) {
				if c == '\'' && sql[j] == '\\' {
					j += 2
					continue
				}
				if sql[j] == c {
					if j+1 < len(sql) && sql[j+1] == c {
						j += 2
						continue
					}
					break
				}
				j++
			}
			end := min(j+1, len(sql))
			b.WriteString(sql[i:end])
			i = end - 1
		case '"':
			j := strings.IndexByte(sql[i+1:], '"')
			if j < 0 {
				b.WriteString(sql[i:])
				return b.String()
			}
			name := sql[i+1 : i+1+j]
			b.WriteString("`" + strings.ReplaceAll(name, "`", "``") + "`")
			i += j + 1
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// dialectExpr is e with its SQL quoted for st's dialect.
func dialectExpr(st *gorm.Statement, e clause.Expr) clause.Expr {
	e.SQL = dialectSQL(st, e.SQL)
	return e
}
