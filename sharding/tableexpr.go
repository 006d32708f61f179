package sharding

import (
	"fmt"

	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/sharding/internal/sqltext"
)

// tableExprName is the table a db.Table expression names
// (classify.TableExprName: GORM sets Statement.Table to the alias of
// "orders o", which names no table). Any other expression (a join, a
// subquery, a list) that reads a sharded table is refused: the router
// would send it whole to one database, and the rows of the others would
// be missing from the answer.
func (s *Sharding) tableExprName(e *clause.Expr) (string, error) {
	if name, ok := classify.TableExprName(e.SQL); ok && len(e.Vars) == 0 {
		return name, nil
	}
	r := s.classifier.Classify("SELECT 1 FROM " + e.SQL)
	for _, n := range r.Reads {
		if t := s.tables[sqltext.NormalizeTable(n)]; t != nil {
			return "", fmt.Errorf("%w: db.Table(%q) reads the sharded table %q inside a table expression; name the table alone (an alias is fine: %q), and write joins with Joins", ErrUnsupportedStatement, e.SQL, t.Name, t.Name+" o")
		}
	}
	if r.UnknownTables {
		return "", fmt.Errorf("%w: db.Table(%q): the tables it reads cannot be named, so whether it reads a sharded table is unknown", ErrUnsupportedStatement, e.SQL)
	}
	return "", nil // no sharded table: the default database's
}
