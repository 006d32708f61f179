package depgraph

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/lsnstore"
)

// AnalyzeMySQL reads the current database's dependency edges from
// information_schema (MariaDB and MySQL), the counterpart of
// AnalyzePostgres:
//
//   - a trigger: its table -> every table of the database its body
//     mentions, or lsnstore.Everything when the body mentions a stored
//     routine of the database or CALLs one (what a routine writes is not
//     analysed). The body (BEGIN … END, IF …) is scanned for identifiers
//     rather than parsed: tables it only reads get an edge too, which
//     sends more reads to the primary, never a stale one;
//   - a foreign key with ON UPDATE or ON DELETE CASCADE, SET NULL or SET
//     DEFAULT: the referenced table -> the referencing table;
//   - a view: each table its definition mentions -> the view (a write to
//     the table changes what the view returns) and, for an updatable view,
//     the view -> each of those tables (a write through the view).
//
// Table names are normalised as the plugin does (lsnstore.TableKey).
func AnalyzeMySQL(ctx context.Context, db *sql.DB) (map[string][]string, error) {
	tables, err := queryNames(ctx, db, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()")
	if err != nil {
		return nil, fmt.Errorf("depgraph: read information_schema.TABLES: %w", err)
	}
	routines, err := queryNames(ctx, db, "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE()")
	if err != nil {
		return nil, fmt.Errorf("depgraph: read information_schema.ROUTINES: %w", err)
	}
	edges := map[string][]string{}
	add := func(from, to string) {
		if from != to && !slices.Contains(edges[from], to) {
			edges[from] = append(edges[from], to)
		}
	}

	// mentioned returns the tables of the database that sql names, and
	// whether it names (or CALLs) a stored routine.
	mentioned := func(sql string) ([]string, bool) {
		names, err := classify.Identifiers(classify.MySQL, sql)
		if err != nil {
			return nil, true
		}
		var out []string
		routine := false
		for _, n := range names {
			k := lsnstore.TableKey(n)
			if tables[k] && !slices.Contains(out, k) {
				out = append(out, k)
			}
			if routines[k] || k == "call" {
				routine = true
			}
		}
		return out, routine
	}

	if err := eachRow(ctx, db, "SELECT EVENT_OBJECT_TABLE, ACTION_STATEMENT FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()",
		func(table, body string) {
			from := lsnstore.TableKey(table)
			if body == "" { // hidden without the TRIGGER privilege
				add(from, lsnstore.Everything)
				return
			}
			ts, routine := mentioned(body)
			for _, t := range ts {
				add(from, t)
			}
			if routine {
				add(from, lsnstore.Everything)
			}
		}); err != nil {
		return nil, fmt.Errorf("depgraph: read information_schema.TRIGGERS: %w", err)
	}
	if err := eachRow(ctx, db, `SELECT REFERENCED_TABLE_NAME, TABLE_NAME FROM information_schema.REFERENTIAL_CONSTRAINTS
WHERE CONSTRAINT_SCHEMA = DATABASE()
  AND (UPDATE_RULE IN ('CASCADE', 'SET NULL', 'SET DEFAULT') OR DELETE_RULE IN ('CASCADE', 'SET NULL', 'SET DEFAULT'))`,
		func(parent, child string) { add(lsnstore.TableKey(parent), lsnstore.TableKey(child)) }); err != nil {
		return nil, fmt.Errorf("depgraph: read information_schema.REFERENTIAL_CONSTRAINTS: %w", err)
	}
	if err := eachRow(ctx, db, "SELECT TABLE_NAME, CONCAT(IS_UPDATABLE, ' ', COALESCE(VIEW_DEFINITION, '')) FROM information_schema.VIEWS WHERE TABLE_SCHEMA = DATABASE()",
		func(view, def string) {
			v := lsnstore.TableKey(view)
			updatable, def, _ := strings.Cut(def, " ")
			if def == "" { // hidden without the SHOW VIEW privilege: any table may feed it
				for t := range tables {
					add(t, v)
				}
				if updatable == "YES" {
					add(v, lsnstore.Everything)
				}
				return
			}
			ts, _ := mentioned(def)
			for _, t := range ts {
				add(t, v)
				if updatable == "YES" {
					add(v, t)
				}
			}
		}); err != nil {
		return nil, fmt.Errorf("depgraph: read information_schema.VIEWS: %w", err)
	}
	return edges, nil
}

// queryNames returns the set of the normalised names query returns.
func queryNames(ctx context.Context, db *sql.DB, query string) (map[string]bool, error) {
	out := map[string]bool{}
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out[lsnstore.TableKey(n)] = true
	}
	return out, rows.Err()
}

// eachRow calls f with the two text columns of each row of query.
func eachRow(ctx context.Context, db *sql.DB, query string, f func(a, b string)) error {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var a, b sql.NullString
		if err := rows.Scan(&a, &b); err != nil {
			return err
		}
		f(a.String, b.String)
	}
	return rows.Err()
}
