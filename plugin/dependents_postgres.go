package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/freshread/freshread/depgraph"
)

// errNotPgx: the PostgreSQL pool's driver is not pgx, whose connection the
// catalog analysis needs.
var errNotPgx = errors.New("plugin: the PostgreSQL driver is not pgx (gorm.io/driver/postgres's default)")

// pgDependents runs the catalog analysis the tracker runs too (triggers
// and the functions they call, cascading foreign keys, rules, views; see
// depgraph.AnalyzePostgres) on one connection of the primary pool, so the
// plugin knows the dependencies without a tracker daemon too.
func pgDependents(ctx context.Context, db *sql.DB) (*depgraph.Graph, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var graph *depgraph.Graph
	err = conn.Raw(func(dc any) error {
		pc, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return fmt.Errorf("%w: %T", errNotPgx, dc)
		}
		g, err := depgraph.AnalyzePostgres(ctx, pc.Conn())
		if err != nil {
			return err
		}
		graph = g
		return nil
	})
	return graph, err
}

// dependentsLearnInterval is how often the plugin rereads its database's
// dependency graph (the tracker refreshes its own as often).
const dependentsLearnInterval = 30 * time.Second
