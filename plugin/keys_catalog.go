package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
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
	// For text: the collation and character set (MariaDB and MySQL),
	// whether the collation is deterministic (PostgreSQL), the longest
	// value in characters (0: no limit), and whether the connection
	// reading the catalog sends UTF-8 (PostgreSQL's client_encoding,
	// MariaDB's and MySQL's character_set_client and _connection).
	collation, charset string
	deterministic      bool
	maxLen             int64
	utf8Client         bool
}

// pgPrimaryKeysQuery lists the primary key columns of every user table,
// in the key's order (not its index's INCLUDE columns: indnkeyatts, read
// through to_jsonb so that a server older than PostgreSQL 11, which has
// no INCLUDE, answers too).
// A collation's collisdeterministic is read through to_jsonb too: a
// server older than PostgreSQL 12 has only deterministic collations.
const pgPrimaryKeysQuery = `
SELECT n.nspname, c.relname, a.attname, t.typname,
  COALESCE(co.collname, ''), '',
  COALESCE((to_jsonb(co)->>'collisdeterministic')::bool, true),
  CASE WHEN t.typname = 'varchar' AND a.atttypmod > 4 THEN a.atttypmod - 4 ELSE 0 END,
  current_setting('client_encoding') = 'UTF8'
FROM pg_index i
CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_collation co ON co.oid = a.attcollation
WHERE i.indisprimary
  AND k.ord <= COALESCE((to_jsonb(i)->>'indnkeyatts')::int, i.indnatts)
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%'
ORDER BY n.nspname, c.relname, k.ord`

// mysqlPrimaryKeysQuery lists the primary key columns of the current
// database's tables (MariaDB and MySQL), in the key's order.
const mysqlPrimaryKeysQuery = `
SELECT k.TABLE_SCHEMA, k.TABLE_NAME, k.COLUMN_NAME, c.DATA_TYPE,
  COALESCE(c.COLLATION_NAME, ''), COALESCE(c.CHARACTER_SET_NAME, ''),
  TRUE, COALESCE(c.CHARACTER_MAXIMUM_LENGTH, 0),
  @@character_set_client = 'utf8mb4' AND @@character_set_connection = 'utf8mb4'
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
		if err := rows.Scan(&c.schema, &c.table, &c.column, &c.dataType,
			&c.collation, &c.charset, &c.deterministic, &c.maxLen, &c.utf8Client); err != nil {
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
// (PostgreSQL's uuid, MariaDB's UUID); text whose equality is byte-wise
// (textKeyType).
func columnKeyType(d classify.Dialect, c pkColumn) (keyType, bool) {
	switch {
	case isIntegerType(d, c.dataType):
		return keyInt, true
	case strings.EqualFold(c.dataType, "uuid"):
		return keyUUID, true
	}
	return textKeyType(d, c)
}

// textTypes are the text column types keyed (byteWiseCollations): not
// PostgreSQL's bpchar (char(n)), whose trailing spaces are insignificant.
var textTypes = map[classify.Dialect][]string{
	classify.Postgres: {"text", "varchar"},
	classify.MySQL:    {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"},
}

// byteWiseCollations are the MariaDB and MySQL collations of utf8mb4 whose
// equality is byte-wise, but for trailing spaces in utf8mb4_bin (PAD
// SPACE); utf8mb4_nopad_bin and MySQL's utf8mb4_0900_bin are NO PAD. All
// are kindTextPad.
var byteWiseCollations = []string{"utf8mb4_bin", "utf8mb4_nopad_bin", "utf8mb4_0900_bin"}

// textKeyType is the key type of a text column when its equality is
// byte-wise, the connection sends UTF-8 (so that a Go string's bytes are
// the characters compared) and, on MariaDB and MySQL, its character set
// is utf8mb4: PostgreSQL's text and varchar with a deterministic
// collation (the bytes), MariaDB's and MySQL's text types with a
// byteWiseCollations collation (the bytes without trailing spaces). A
// case- or accent-insensitive collation, or any other, is not keyed.
func textKeyType(d classify.Dialect, c pkColumn) (keyType, bool) {
	if !c.utf8Client || !slices.ContainsFunc(textTypes[d], func(t string) bool { return strings.EqualFold(t, c.dataType) }) {
		return keyType{}, false
	}
	t := keyType{kind: kindText}
	if d == classify.MySQL {
		if !strings.EqualFold(c.charset, "utf8mb4") || !slices.Contains(byteWiseCollations, strings.ToLower(c.collation)) {
			return keyType{}, false
		}
		t.kind = kindTextPad
	} else if !c.deterministic {
		return keyType{}, false
	}
	if c.maxLen > 0 && c.maxLen < maxTextKey {
		t.maxLen = int(c.maxLen) // in characters: a value of as many bytes has no more
	}
	return t, true
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
		if p.isStopped() {
			return // Close cancelled it
		}
		if !ck.failing {
			p.cfg.Logger.WarnContext(ctx, "freshread: cannot read the tables' primary keys; raw SQL and reads without a model are keyed only by the keys models have shown: let the primary's role read the catalog (err says what failed); it is tried again at the next catalog read", "err", err)
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
