package plugin

import (
	"context"
	"database/sql"
	"fmt"
)

// readOnlyFunctionsQuery lists the user-defined functions whose every
// overload is IMMUTABLE or STABLE. PostgreSQL runs such functions with a
// read-only snapshot and refuses data-modifying statements in them, so raw
// SQL that calls them may go to a replica (pgpool-II keeps the same kind of
// list). A name with any VOLATILE overload stays a write.
//
// It returns one row per (schema, name) with whether all its overloads are
// read-only; the bare name is read-only only when it is in every schema.
const readOnlyFunctionsQuery = `
SELECT n.nspname, p.proname, bool_and(p.provolatile IN ('i', 's'))
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
GROUP BY n.nspname, p.proname`

// pgReadOnlyFunctions lists the primary's read-only user functions, bare
// and schema-qualified.
func pgReadOnlyFunctions(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, readOnlyFunctionsQuery)
	if err != nil {
		return nil, fmt.Errorf("plugin: read function volatility: %w", err)
	}
	defer rows.Close()
	var names []string
	bare := map[string]bool{} // name -> read-only in every schema
	for rows.Next() {
		var (
			schema, name string
			readOnly     bool
		)
		if err := rows.Scan(&schema, &name, &readOnly); err != nil {
			return nil, fmt.Errorf("plugin: read function volatility: %w", err)
		}
		if readOnly {
			names = append(names, schema+"."+name)
		}
		if prev, seen := bare[name]; !seen || prev {
			bare[name] = readOnly
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("plugin: read function volatility: %w", err)
	}
	for name, readOnly := range bare {
		if readOnly {
			names = append(names, name)
		}
	}
	return names, nil
}
