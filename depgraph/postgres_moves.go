package depgraph

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/freshread/freshread/lsnstore"
)

// This file reads what AnalyzePostgres needs beyond triggers, rules,
// cascades and views: partitions and inheritance children, the columns
// that change without a statement naming them, and the columns of
// primary keys and unique indexes they are checked against.

const inheritsQuery = `
SELECT p.relname::text, c.relname::text
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_class p ON p.oid = i.inhparent
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'f') AND p.relkind IN ('r', 'p', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')`

// inheritance adds parent <-> child for each partition and inheritance
// child: a write through the parent writes the child's rows (UPDATE and
// DELETE without ONLY, an INSERT routed to a partition, a row moved
// between partitions by an update of its partition key), and a write to
// the child changes what a read of the parent returns. Deeper levels
// follow by the closure.
func inheritance(ctx context.Context, q Querier, g *Graph) error {
	return eachPgPair(ctx, q, inheritsQuery, "pg_inherits", func(parent, child string) {
		p, c := lsnstore.TableKey(parent), lsnstore.TableKey(child)
		g.alias(p, c)
		g.alias(c, p)
	})
}

// generatedQuery lists stored generated columns (PostgreSQL 12 and
// later).
const generatedQuery = `
SELECT c.relname::text, a.attname::text
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE a.attgenerated = 's' AND a.attnum > 0 AND NOT a.attisdropped
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')`

// generatedColumns records stored generated columns as moving: an update
// of any column they are computed from changes them.
func (a *analyzer) generatedColumns(ctx context.Context, q Querier, m *moves) error {
	if a.version < 120000 {
		return nil
	}
	return eachPgPair(ctx, q, generatedQuery, "generated columns", func(table, col string) {
		m.add(lsnstore.TableKey(table), col, fmt.Sprintf("column %s of %s is generated: an update of what it is computed from changes it", col, table))
	})
}

const keyColumnsQuery = `
SELECT DISTINCT c.relname::text, a.attname::text
FROM pg_index i
JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY (i.indkey::int2[])
WHERE (i.indisprimary OR i.indisunique) AND a.attnum > 0
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%'`

// keyColumns returns, per table, the columns of its primary key and
// unique indexes: the columns a process may key the table by.
func keyColumns(ctx context.Context, q Querier) (map[string][]string, error) {
	keys := map[string][]string{}
	err := eachPgPair(ctx, q, keyColumnsQuery, "key columns", func(table, col string) {
		t := lsnstore.TableKey(table)
		keys[t] = appendNew(keys[t], col)
	})
	return keys, err
}

// eachPgPair calls f with the two text columns of each row of query; an
// error names what was read.
func eachPgPair(ctx context.Context, q Querier, query, what string, f func(a, b string)) error {
	rows, err := q.Query(ctx, query)
	if err != nil {
		return fmt.Errorf("depgraph: read %s: %w", what, err)
	}
	var a, b string
	if _, err := pgx.ForEachRow(rows, []any{&a, &b}, func() error { f(a, b); return nil }); err != nil {
		return fmt.Errorf("depgraph: read %s: %w", what, err)
	}
	return nil
}

// beforeTriggerAssigns returns the columns of its row that a BEFORE row
// trigger may change, "*" for any: for a PL/pgSQL function, the columns
// it assigns (NEW.c := ..., SELECT ... INTO NEW.c) or "*" when it assigns
// NEW whole or returns another row; for the built-ins that set a column
// named by the trigger's first argument (moddatetime,
// tsvector_update_trigger), that column; suppress_redundant_updates_trigger
// none; any other function "*".
func beforeTriggerAssigns(f *userFunc, fname string, args []string) []string {
	switch fname {
	case "suppress_redundant_updates_trigger":
		return nil
	case "moddatetime", "tsvector_update_trigger", "tsvector_update_trigger_column":
		if len(args) > 0 {
			return []string{args[0]}
		}
		return []string{"*"}
	}
	if f == nil || f.lang != "plpgsql" {
		return []string{"*"}
	}
	return assignedNewColumns(lex(f.body))
}

// inIntoList reports whether the target starting at toks[i] is in the
// target list of an INTO (INTO a, NEW.b, c): back over comma-separated
// variables and NEW.x targets to the INTO.
func inIntoList(toks []token, i int) bool {
	j := i - 1
	for j >= 0 {
		switch {
		case toks[j].is("into"):
			return true
		case !toks[j].op(","):
			return false
		}
		j-- // the comma
		switch {
		case j >= 2 && toks[j-1].op(".") && toks[j-2].kind == tIdent:
			j -= 3 // NEW.x or rec.x
		case j >= 0 && (toks[j].kind == tIdent || toks[j].kind == tQIdent):
			j-- // a variable
		default:
			return false
		}
	}
	return false
}

// assignedNewColumns scans a PL/pgSQL body for what it may change of NEW.
// It over-approximates: a comparison NEW.c = v counts as an assignment.
func assignedNewColumns(toks []token) []string {
	var cols []string
	name := func(t token) (string, bool) {
		switch t.kind {
		case tIdent:
			return t.low, true
		case tQIdent:
			return t.low, true
		}
		return "", false
	}
	for i, t := range toks {
		switch {
		case t.is("new") && i+1 < len(toks) && (toks[i+1].op(":=") || toks[i+1].op("=")):
			return []string{"*"} // NEW := ...
		case t.is("into") && i+1 < len(toks) && toks[i+1].is("new") && !(i+2 < len(toks) && toks[i+2].op(".")):
			return []string{"*"} // SELECT ... INTO NEW
		case t.is("return") && i+1 < len(toks):
			n := toks[i+1]
			if !(n.is("new") || n.is("old") || n.is("null") || n.op(";")) || (i+2 < len(toks) && !toks[i+2].op(";")) {
				return []string{"*"} // RETURN another row, or an expression
			}
		case t.is("new") && i+2 < len(toks) && toks[i+1].op("."):
			c, ok := name(toks[i+2])
			if !ok {
				return []string{"*"}
			}
			assigned := i+3 < len(toks) && (toks[i+3].op(":=") || toks[i+3].op("="))
			if assigned || inIntoList(toks, i) {
				cols = appendNew(cols, c)
			}
		}
	}
	return cols
}
