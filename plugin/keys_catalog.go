package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/lsnstore"
)

// Primary keys from the catalog: the plugin reads every table's primary
// key when it starts, with the dependency graph, every
// dependentsLearnInterval after, and after each schema change run through
// it (relearnAfterDDL), so that raw SQL and GORM statements without a
// model (db.Table) are keyed from their first statement. Primary keys
// whose columns are integers or uuids count (catalogKeyDef), composite
// ones too. A model's integer primary key,
// once seen, takes precedence (tableKeyNames.pk): GORM statements with the
// model are keyed by it, and one process keys a table by one signature.

// catalogKeys is what the plugin learnt from the catalog (guarded by mu
// for writers; keys is read without it).
type catalogKeys struct {
	keys atomic.Pointer[map[string]*keyDef] // table -> primary key
	mu   sync.Mutex
	// started numbers the learnings begun, installed the one whose result
	// is in keys: a learning that began before the installed one is
	// dropped (it read the catalog before a schema change that the
	// installed one saw).
	started, installed uint64
	failing            bool // the last learning failed (warned once a spell)
}

// pkColumn is one column of a primary key as the catalog lists it, in
// the key's order.
type pkColumn struct {
	schema, table, column, dataType string
}

// pgPrimaryKeysQuery lists the primary key columns of every user table,
// in the key's order (not its index's INCLUDE columns: indnkeyatts, read
// through to_jsonb so that a server older than PostgreSQL 11, which has
// no INCLUDE, answers too).
const pgPrimaryKeysQuery = `
SELECT n.nspname, c.relname, a.attname, t.typname
FROM pg_index i
CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
JOIN pg_type t ON t.oid = a.atttypid
WHERE i.indisprimary
  AND k.ord <= COALESCE((to_jsonb(i)->>'indnkeyatts')::int, i.indnatts)
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%'
ORDER BY n.nspname, c.relname, k.ord`

// mysqlPrimaryKeysQuery lists the primary key columns of the current
// database's tables (MariaDB and MySQL), in the key's order.
const mysqlPrimaryKeysQuery = `
SELECT k.TABLE_SCHEMA, k.TABLE_NAME, k.COLUMN_NAME, c.DATA_TYPE
FROM information_schema.KEY_COLUMN_USAGE k
JOIN information_schema.COLUMNS c
  ON c.TABLE_SCHEMA = k.TABLE_SCHEMA AND c.TABLE_NAME = k.TABLE_NAME AND c.COLUMN_NAME = k.COLUMN_NAME
WHERE k.TABLE_SCHEMA = DATABASE() AND k.CONSTRAINT_NAME = 'PRIMARY'
ORDER BY k.TABLE_SCHEMA, k.TABLE_NAME, k.ORDINAL_POSITION`

// integerTypes are the catalog's names of integer column types: pg_type's
// on PostgreSQL, DATA_TYPE on MariaDB and MySQL.
var integerTypes = map[classify.Dialect][]string{
	classify.Postgres: {"int2", "int4", "int8"},
	classify.MySQL:    {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"},
}

// readPrimaryKeys reads the primary keys of the database db is connected
// to that keys are named by (catalogKeyDefs).
func readPrimaryKeys(ctx context.Context, db *sql.DB, d classify.Dialect) (map[string]*keyDef, error) {
	query := pgPrimaryKeysQuery
	if d == classify.MySQL {
		query = mysqlPrimaryKeysQuery
	}
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("plugin: read the tables' primary keys: %w", err)
	}
	defer rows.Close()
	var cols []pkColumn
	for rows.Next() {
		var c pkColumn
		if err := rows.Scan(&c.schema, &c.table, &c.column, &c.dataType); err != nil {
			return nil, fmt.Errorf("plugin: read the tables' primary keys: %w", err)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("plugin: read the tables' primary keys: %w", err)
	}
	return catalogKeyDefs(cols, d), nil
}

// catalogKeyDefs maps each table (normalized as lsnstore.TableKey names
// it) to its primary key (cols lists each key's columns in its order)
// when every column is of a type keys are named by (columnKeyType). Column names are kept as the catalog spells
// them on PostgreSQL (as a model's and the classifier's are) and
// lower-cased on MariaDB and MySQL, whose column names ignore case. A
// name that several tables share (in several schemas, or differing in
// case) is left out unless they all have the same key: every process then
// reads the same answer.
func catalogKeyDefs(cols []pkColumn, d classify.Dialect) map[string]*keyDef {
	type qualified struct{ schema, table string }
	var order []qualified
	byTable := map[qualified][]pkColumn{}
	for _, c := range cols {
		q := qualified{c.schema, c.table}
		if _, ok := byTable[q]; !ok {
			order = append(order, q)
		}
		byTable[q] = append(byTable[q], c)
	}
	keys := map[string]*keyDef{}
	excluded := map[string]bool{}
	for _, q := range order {
		table := lsnstore.TableKey(q.table)
		if excluded[table] {
			continue
		}
		k, ok := catalogKeyDef(byTable[q], d)
		if prev, seen := keys[table]; !ok || seen && !prev.same(k) {
			excluded[table] = true
			delete(keys, table)
			continue
		}
		keys[table] = k
	}
	return keys
}

// catalogKeyDef is the key of one table's primary key columns (several:
// a composite key, keyed only where every column is pinned), or ok false
// when a column's type is not one keys are named by, or its name has a
// character that names use as a separator.
func catalogKeyDef(cols []pkColumn, d classify.Dialect) (*keyDef, bool) {
	if len(cols) == 0 || len(cols) > maxKeyColumns {
		return nil, false
	}
	names := make([]string, len(cols))
	types := make([]keyType, len(cols))
	for i, c := range cols {
		t, ok := columnKeyType(d, c)
		if !ok || strings.ContainsAny(c.column, "#,:;=%") {
			return nil, false
		}
		names[i], types[i] = c.column, t
		if d == classify.MySQL {
			names[i] = strings.ToLower(c.column)
		}
	}
	return newKeyDef(names, types), true
}

// columnKeyType is how a key column of c's type is keyed: integers; uuid
// (PostgreSQL's uuid, MariaDB's UUID).
func columnKeyType(d classify.Dialect, c pkColumn) (keyType, bool) {
	switch {
	case isIntegerType(d, c.dataType):
		return keyInt, true
	case strings.EqualFold(c.dataType, "uuid"):
		return keyUUID, true
	}
	return 0, false
}

func isIntegerType(d classify.Dialect, typ string) bool {
	for _, t := range integerTypes[d] {
		if strings.EqualFold(typ, t) {
			return true
		}
	}
	return false
}

// learnKeys reads the tables' primary keys from the primary's catalog and
// installs them. On an error the keys learnt before stay (a key column
// that is not the table's primary key is still a safe key, the signature
// protocol agreeing on it: keys_signature.go).
func (p *Plugin) learnKeys(ctx context.Context) {
	if !p.cfg.keyed() || p.primaryDB == nil || p.engine == nil {
		return
	}
	ck := &p.catalog
	ck.mu.Lock()
	ck.started++
	gen := ck.started
	ck.mu.Unlock()
	keys, err := readPrimaryKeys(ctx, p.primaryDB, p.engine.dialect())
	ck.mu.Lock()
	defer ck.mu.Unlock()
	if err != nil {
		if !ck.failing {
			p.cfg.Logger.WarnContext(ctx, "freshread: cannot read the tables' primary keys; raw SQL and reads without a model are keyed only by the keys models have shown", "err", err)
		}
		ck.failing = true
		return
	}
	ck.failing = false
	if gen < ck.installed {
		return // a later learning has installed what it read
	}
	ck.installed = gen
	ck.keys.Store(&keys)
}

// catalogKey is table's primary key by the catalog.
func (p *Plugin) catalogKey(table string) (*keyDef, bool) {
	m := p.catalog.keys.Load()
	if m == nil {
		return nil, false
	}
	k, ok := (*m)[table]
	return k, ok
}

// knownKey is the primary key this process keys table by when a
// statement has no model that names it: the integer one the table's
// models use, else the catalog's.
func (p *Plugin) knownKey(tn *tableKeyNames, table string) (*keyDef, bool) {
	if k := tn.pk.Load(); k != nil {
		return k, true
	}
	return p.catalogKey(table)
}
