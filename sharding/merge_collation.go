package sharding

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/freshread/freshread/sharding/merge"
)

// Collations. A merge compares text by its bytes: ORDER BY, MIN/MAX and
// HAVING's < need the shards to sort text in byte order, DISTINCT, GROUP
// BY and count(DISTINCT) need them to call two values equal only when
// their bytes are (merge.Collation). Each text column of the read's table
// is checked on every shard, read from the catalog:
//
//   - PostgreSQL: the database's default collation (textByteOrder) and
//     each column's (pg_collation): "C", "POSIX", "C.UTF-8" (libc or
//     builtin) and "ucs_basic" sort in byte order; every other libc or
//     ICU collation does not. Every collation but a nondeterministic ICU
//     one (case- or accent-insensitive) compares equal by bytes.
//   - MariaDB and MySQL: each column's collation
//     (information_schema.COLUMNS, which holds the table's and the
//     database's defaults applied): only binary and NO PAD binary
//     collations (utf8mb4_nopad_bin, utf8mb4_0900_bin) compare by bytes;
//     the _ci, _ai and UCA ones ignore case or accents, and the PAD SPACE
//     _bin ones ignore trailing spaces ('a' = 'a ', and 'a\t' sorts before
//     'a'): neither order nor equality. A CHAR(n) column of a binary
//     collation gives equality, not order: the server stores it padded
//     with spaces and reads it without them, and sorts the padded value
//     in ORDER BY ('a\t' before 'a') but the value read in MIN/MAX and
//     comparisons ('a' before 'a\t').
//   - PostgreSQL's char(n) (bpchar) is read padded and compared without
//     its trailing spaces in every case: the merge compares it so
//     (merge's kindPadded), exact under the collations above.
//
// A merge that needs what a table's collations do not give is refused
// (ErrScatterUnsupported naming the column).
//
// On MariaDB and MySQL text computed by an expression rather than read
// from a column — a string literal, CASE … THEN 'x', CAST(… AS CHAR),
// CONCAT of numbers — takes the connection's collation
// (collation_connection; utf8mb4_general_ci for the Go driver unless the
// DSN says otherwise), and an expression mixing a column with literals
// may take either. Such a key (merge.Collation.Expr, the keys the merge
// plan cannot name as a column) is compared only when both the tables'
// collations and every shard's collation_connection are byte order;
// otherwise it is refused naming the expression.

// tableCollations caches the collation of each merged table.
type tableCollations struct {
	mu   sync.Mutex
	m    map[string]tableCollation
	conn connCollation            // the shards' collation_connection (MariaDB/MySQL)
	rank map[string]rankCollation // table, NUL, column: its collation for ranking (merge_rank.go)
}

// connCollation is the cached answer of Sharding.connCollation.
type connCollation struct {
	c  merge.Collation
	ok bool
	at time.Time
}

type tableCollation struct {
	c  merge.Collation
	at time.Time
}

// tableCollationTTL is how long an answer is kept: a column's collation
// changed by ALTER TABLE is seen within it.
const tableCollationTTL = 30 * time.Second

// TextCollation is the database's collation combined with the columns'
// of the read's table and of every table it joins.
func (m *mergeShards) TextCollation(ctx context.Context) merge.Collation {
	c := m.s.textByteOrder(ctx)
	if !c.Equal || m.tg.t == nil {
		return c
	}
	tables := []string{m.tg.t.Name}
	for _, n := range m.tg.joined {
		if !slices.Contains(tables, n) {
			tables = append(tables, n)
		}
	}
	// Every table the read joins: a merged column, alias or expression
	// may come from any of them.
	out := c
	for _, n := range tables {
		tc := m.s.tableCollation(ctx, n)
		switch {
		case !tc.Equal:
			return tc
		case !tc.Order && out.Order:
			out = tc
		}
	}
	// An expression's text may take the connection's collation instead.
	if cc, ok := m.s.connCollation(ctx); ok {
		e := out
		switch {
		case !cc.Equal:
			e = cc
		case !cc.Order && e.Order:
			e.Order, e.Why = false, cc.Why
		}
		out.Expr = &e
	}
	return out
}

// connCollation reads how every MariaDB or MySQL shard compares text
// collated by the connection (@@collation_connection, read on one pooled
// connection: the DSN sets it for all; a session's SET NAMES is not
// seen); ok is false when no shard is one. Cached for tableCollationTTL.
func (s *Sharding) connCollation(ctx context.Context) (c merge.Collation, ok bool) {
	tc := &s.tcoll
	tc.mu.Lock()
	if e := tc.conn; !e.at.IsZero() && time.Since(e.at) < tableCollationTTL {
		tc.mu.Unlock()
		return e.c, e.ok
	}
	tc.mu.Unlock()
	out := merge.Collation{Order: true, Equal: true}
	for _, sh := range s.shards {
		if dialect(sh) != "mysql" {
			continue
		}
		ok = true
		sdb, err := sh.sqlDB()
		if err != nil {
			return merge.Collation{Why: err.Error()}, true // not cached
		}
		var coll string
		if err := sdb.QueryRowContext(ctx, `SELECT @@collation_connection`).Scan(&coll); err != nil {
			return merge.Collation{Why: fmt.Sprintf("shard %q: reading its collation_connection: %v", sh.name, err)}, true
		}
		if !byteOrderMySQL(coll) {
			out = merge.Collation{Why: fmt.Sprintf("shard %q compares text computed by an expression (a string literal, CASE … THEN 'x', CAST(… AS CHAR), CONCAT) by its connection's collation %s (collation_connection), which does not compare by bytes (set collation_connection=utf8mb4_nopad_bin in the DSN, or order, group or de-duplicate by a column)", sh.name, coll)}
			break
		}
	}
	tc.mu.Lock()
	tc.conn = connCollation{c: out, ok: ok, at: time.Now()}
	tc.mu.Unlock()
	return out, ok
}

// byteOrderMySQL reports whether a MariaDB/MySQL collation compares text
// by its bytes, in order and equality: binary and the NO PAD binary
// ones.
func byteOrderMySQL(coll string) bool {
	n := strings.ToLower(coll)
	return n == "binary" || strings.HasSuffix(n, "_nopad_bin") || strings.HasSuffix(n, "_0900_bin")
}

// tableCollation reads how every shard compares the text columns of
// table (cached for tableCollationTTL).
func (s *Sharding) tableCollation(ctx context.Context, table string) merge.Collation {
	tc := &s.tcoll
	tc.mu.Lock()
	if e, ok := tc.m[table]; ok && time.Since(e.at) < tableCollationTTL {
		tc.mu.Unlock()
		return e.c
	}
	tc.mu.Unlock()
	out := merge.Collation{Order: true, Equal: true}
	for _, sh := range s.shards {
		cols, err := s.columnCollations(ctx, sh, table)
		if err != nil {
			// Not cached: read again next time.
			return merge.Collation{Why: fmt.Sprintf("shard %q: reading the collations of %q: %v", sh.name, table, err)}
		}
		for _, col := range cols {
			why := fmt.Sprintf("shard %q: column %q of %q collates with %q", sh.name, col.name, table, col.coll)
			switch {
			case !col.equal && out.Equal:
				out = merge.Collation{Why: why + ", which calls different bytes equal (group or de-duplicate by a column of a byte-order collation, or declare the column " + byteOrderRemedy(sh) + ")"}
			case !col.order && out.Order && col.padded:
				out.Order, out.Why = false, fmt.Sprintf("shard %q: column %q of %q is CHAR(n), which the server sorts padded with spaces in ORDER BY but compares without them in MIN/MAX and conditions (sort by a non-text column, or declare the column VARCHAR %s)", sh.name, col.name, table, byteOrderRemedy(sh))
			case !col.order && out.Order:
				out.Order, out.Why = false, why+", not byte order (sort by a non-text column, or declare the column "+byteOrderRemedy(sh)+")"
			}
		}
		if !out.Equal {
			break
		}
	}
	tc.mu.Lock()
	if tc.m == nil {
		tc.m = map[string]tableCollation{}
	}
	tc.m[table] = tableCollation{c: out, at: time.Now()}
	tc.mu.Unlock()
	return out
}

func byteOrderRemedy(sh *shard) string {
	if dialect(sh) == "postgres" {
		return `COLLATE "C"`
	}
	return "COLLATE utf8mb4_nopad_bin"
}

func dialect(sh *shard) string {
	if sh.db.Dialector == nil {
		return ""
	}
	return sh.db.Dialector.Name()
}

// columnCollation is how one text column compares.
type columnCollation struct {
	name, coll   string
	order, equal bool
	padded       bool // MariaDB/MySQL CHAR(n) (its order is not one collation's)
}

// columnCollations reads the collation of every text column of table on
// sh.
func (s *Sharding) columnCollations(ctx context.Context, sh *shard, table string) ([]columnCollation, error) {
	sdb, err := sh.sqlDB()
	if err != nil {
		return nil, err
	}
	var out []columnCollation
	switch dialect(sh) {
	case "postgres":
		// collprovider 'd' is the database's default (textByteOrder);
		// collcollate is NULL for ICU collations from PostgreSQL 15, and
		// collisdeterministic absent before 12 (every collation was).
		rows, err := sdb.QueryContext(ctx, `SELECT a.attname, c.collname, c.collprovider::text,
  COALESCE(to_jsonb(c)->>'collcollate', ''), COALESCE((to_jsonb(c)->>'collisdeterministic')::bool, true)
FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, table)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var c columnCollation
			var provider, locale string
			if err := rows.Scan(&c.name, &c.coll, &provider, &locale, &c.equal); err != nil {
				return nil, err
			}
			switch provider {
			case "d":
				c.order = true // the database's: checked by textByteOrder
			case "c", "b":
				c.order = c.coll == "ucs_basic" || byteOrderLocale(locale)
			}
			out = append(out, c)
		}
		return out, rows.Err()
	case "mysql":
		schemaName, name := "", table
		if i := strings.LastIndexByte(table, '.'); i >= 0 {
			schemaName, name = table[:i], table[i+1:]
		}
		rows, err := sdb.QueryContext(ctx, `SELECT COLUMN_NAME, COLLATION_NAME, DATA_TYPE FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ? AND COLLATION_NAME IS NOT NULL ORDER BY ORDINAL_POSITION`, schemaName, name)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var c columnCollation
			var typ string
			if err := rows.Scan(&c.name, &c.coll, &typ); err != nil {
				return nil, err
			}
			c.order = byteOrderMySQL(c.coll)
			c.equal = c.order
			if c.order && strings.EqualFold(typ, "char") {
				// CHAR(n) is stored padded with spaces and read without
				// them: ORDER BY sorts the padded value ('a\t' before
				// 'a'), MIN/MAX and comparisons the value read ('a'
				// before 'a\t'). Equality is the same either way.
				c.order, c.padded = false, true
			}
			out = append(out, c)
		}
		return out, rows.Err()
	}
	return nil, fmt.Errorf("dialect %q: collations unknown", dialect(sh))
}

// byteOrderLocale reports whether a libc or builtin locale sorts text in
// byte order.
func byteOrderLocale(l string) bool {
	switch strings.ToLower(l) {
	case "c", "posix", "c.utf8", "c.utf-8":
		return true
	}
	return false
}
