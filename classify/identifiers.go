package classify

import "fmt"

// Identifiers returns every identifier of sql in order: unquoted words
// (keywords included) and quoted identifiers, lower-cased for MySQL (whose
// table names freshread compares in lower case) and for PostgreSQL's
// unquoted words. Strings, numbers, comments and operators are left out;
// a qualified name gives each part. It is for conservative scans of SQL
// that the classifier cannot analyse as one statement, such as a MySQL
// trigger body with BEGIN … END: any table the SQL writes is among the
// identifiers. An unterminated string, comment or quoted identifier is an
// error.
func Identifiers(d Dialect, sql string) ([]string, error) {
	var (
		toks []token
		err  error
	)
	switch d {
	case MySQL:
		toks, err = lexMySQL(sql, nil)
	case Postgres:
		toks, err = lexPostgres(sql, nil)
	default:
		return nil, fmt.Errorf("classify: Identifiers: unknown dialect %d", d)
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range toks {
		if t.kind == tIdent || t.kind == tQIdent {
			out = append(out, t.text)
		}
	}
	return out, nil
}
