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

// AnalyzeMySQL reads the dependency edges of every database of the server
// from information_schema (MariaDB and MySQL), the counterpart of
// AnalyzePostgres; table names lose their database (lsnstore.TableKey),
// so an edge into another database's table t raises every t:
//
//   - a trigger: its table -> every table of the database its body
//     mentions, or lsnstore.Everything when the body mentions a stored
//     routine of the database or CALLs one (what a routine writes is not
//     analysed). The body (BEGIN … END, IF …) is scanned for identifiers
//     rather than parsed: tables it only reads get an edge too, which
//     sends more reads to the primary, never a stale one;
//   - a foreign key with ON UPDATE or ON DELETE CASCADE, SET NULL or SET
//     DEFAULT: the referenced table -> the referencing table (itself for a
//     self-referencing key: a tree of categories);
//   - a view: each table its definition mentions -> the view (a write to
//     the table changes what the view returns) and, for an updatable view,
//     the view -> each of those tables (a write through the view);
//   - self-dependencies (selfdeps.go): a self-referencing cascading key, a
//     cycle through triggers or cascades, and a column of a primary key or
//     unique index that a BEFORE trigger assigns (SET NEW.c = ...), that is
//     generated, or that is ON UPDATE CURRENT_TIMESTAMP give the table an
//     edge to itself. The columns and keys are read from every database
//     too, merged by table name: the service may write another database's
//     table by its qualified name, keyed by a model, so a same-named table
//     whose key moves in any database makes the name self-dependent.
//
// Table names are normalised as the plugin does (lsnstore.TableKey).
func AnalyzeMySQL(ctx context.Context, db *sql.DB) (*Graph, error) {
	tables, err := queryNames(ctx, db, "SELECT DISTINCT TABLE_NAME FROM information_schema.TABLES WHERE "+userSchemas("TABLE_SCHEMA"))
	if err != nil {
		return nil, fmt.Errorf("depgraph: read information_schema.TABLES: %w", err)
	}
	routines, err := queryNames(ctx, db, "SELECT DISTINCT ROUTINE_NAME FROM information_schema.ROUTINES WHERE "+userSchemas("ROUTINE_SCHEMA"))
	if err != nil {
		return nil, fmt.Errorf("depgraph: read information_schema.ROUTINES: %w", err)
	}
	g := &Graph{}
	m := newMoves()

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

	if err := eachRow(ctx, db, `SELECT CONCAT_WS(CHAR(31), EVENT_OBJECT_TABLE, TRIGGER_NAME, ACTION_TIMING, EVENT_MANIPULATION), ACTION_STATEMENT
FROM information_schema.TRIGGERS WHERE `+userSchemas("TRIGGER_SCHEMA"),
		func(head, body string) {
			f := strings.Split(head, "\x1f") // names may hold spaces
			if len(f) != 4 {
				return
			}
			table, name, timing, event := f[0], f[1], f[2], f[3]
			from := lsnstore.TableKey(table)
			if body == "" { // hidden without the TRIGGER privilege
				g.addEverything(from, fmt.Sprintf("trigger %s on %s: its body cannot be read", name, table))
				return
			}
			if timing == "BEFORE" && event != "DELETE" {
				why := fmt.Sprintf("BEFORE trigger %s on %s may change a key of the row it writes", name, table)
				for _, c := range assignedNewColumns(lex(mysqlBodyForLex(body))) {
					m.add(from, c, why)
				}
			}
			ts, routine := mentioned(body)
			for _, t := range ts {
				if t != from { // a trigger cannot write its own table here (ER_CANT_UPDATE_USED_TABLE_IN_SF_OR_TRG)
					g.effect(from, t, fmt.Sprintf("trigger %s on %s writes %s", name, table, t))
				}
			}
			if routine {
				g.addEverything(from, fmt.Sprintf("trigger %s on %s calls a stored routine", name, table))
			}
		}); err != nil {
		return nil, fmt.Errorf("depgraph: read information_schema.TRIGGERS: %w", err)
	}
	if err := eachRow(ctx, db, `SELECT REFERENCED_TABLE_NAME, TABLE_NAME FROM information_schema.REFERENTIAL_CONSTRAINTS
WHERE `+userSchemas("CONSTRAINT_SCHEMA")+`
  AND (UPDATE_RULE IN ('CASCADE', 'SET NULL', 'SET DEFAULT') OR DELETE_RULE IN ('CASCADE', 'SET NULL', 'SET DEFAULT'))`,
		func(parent, child string) {
			p, c := lsnstore.TableKey(parent), lsnstore.TableKey(child)
			g.effect(p, c, fmt.Sprintf("a foreign key of %s cascades to %s", child, parent))
		}); err != nil {
		return nil, fmt.Errorf("depgraph: read information_schema.REFERENTIAL_CONSTRAINTS: %w", err)
	}
	if err := eachRow(ctx, db, "SELECT TABLE_NAME, CONCAT(IS_UPDATABLE, ' ', COALESCE(VIEW_DEFINITION, '')) FROM information_schema.VIEWS WHERE "+userSchemas("TABLE_SCHEMA"),
		func(view, def string) {
			v := lsnstore.TableKey(view)
			updatable, def, _ := strings.Cut(def, " ")
			if def == "" { // hidden without the SHOW VIEW privilege: any table may feed it
				for t := range tables {
					g.alias(t, v)
				}
				if updatable == "YES" {
					g.addEverything(v, fmt.Sprintf("view %s: its definition cannot be read", view))
				}
				return
			}
			ts, _ := mentioned(def)
			for _, t := range ts {
				g.alias(t, v)
				if updatable == "YES" {
					g.alias(v, t)
				}
			}
		}); err != nil {
		return nil, fmt.Errorf("depgraph: read information_schema.VIEWS: %w", err)
	}
	if err := eachRow(ctx, db, `SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS
WHERE `+userSchemas("TABLE_SCHEMA")+` AND (EXTRA LIKE '%VIRTUAL GENERATED%' OR EXTRA LIKE '%STORED GENERATED%' OR EXTRA LIKE '%PERSISTENT%' OR EXTRA LIKE '%on update%')`,
		func(table, col string) {
			m.add(lsnstore.TableKey(table), strings.ToLower(col), fmt.Sprintf("column %s of %s is generated or set on update", col, table))
		}); err != nil {
		return nil, fmt.Errorf("depgraph: read information_schema.COLUMNS: %w", err)
	}
	keys := map[string][]string{}
	if err := eachRow(ctx, db, "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE "+userSchemas("TABLE_SCHEMA")+" AND NON_UNIQUE = 0",
		func(table, col string) {
			t := lsnstore.TableKey(table)
			keys[t] = appendNew(keys[t], strings.ToLower(col))
		}); err != nil {
		return nil, fmt.Errorf("depgraph: read information_schema.STATISTICS: %w", err)
	}
	g.finish(m, keys)
	return g, nil
}

// userSchemas is the condition on column that keeps the server's own
// databases out: the graph spans every database of the server, since a
// trigger, cascade or view may cross from one into another, and the
// plugin names a table without its database (lsnstore.TableKey), so the
// same-named tables of several databases share their positions (more
// reads wait, never fewer).
func userSchemas(column string) string {
	return column + " NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')"
}

// mysqlBodyForLex makes a MySQL trigger body lexable by the PostgreSQL
// lexer: backquoted names become double-quoted ones, and backslash escapes
// in strings lose their backslash (so that a quote escaped by one stays
// inside its string).
func mysqlBodyForLex(body string) string {
	return strings.NewReplacer("`", `"`, `\\`, "__", `\'`, "''", `\"`, `""`).Replace(body)
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
