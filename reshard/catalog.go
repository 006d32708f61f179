package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// column is one column of a table on one shard.
type column struct {
	name string // unquoted
	typ  string // PostgreSQL: format_type(atttypid, atttypmod); MariaDB: COLUMN_TYPE
	base string // MariaDB: DATA_TYPE (bigint, varchar, ...)
	pos  int    // MariaDB: the column's index among all the table's columns, generated ones included (the binlog's)
}

// tableSide is a sharded table as one shard's catalog describes it.
type tableSide struct {
	rel    relName
	qname  string   // "schema"."name"
	cols   []column // insertable (not generated, not dropped), by attnum
	pk     []column
	key    column
	always bool // a GENERATED ALWAYS identity column: inserts say OVERRIDING SYSTEM VALUE
	ncols  int  // MariaDB: the number of columns, generated ones included
}

func (t *tableSide) col(name string) (column, bool) {
	for _, c := range t.cols {
		if c.name == name {
			return c, true
		}
	}
	return column{}, false
}

// readPrimaryKey sets ts.pk from query, which returns the primary key's
// column names in order; no primary key, or a generated column in it, is
// ErrSchema.
func (ts *tableSide) readPrimaryKey(ctx context.Context, db *sql.DB, shard string, t Table, query string, args ...any) error {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("reshard: shard %s: primary key of %s: %w", shard, t.Name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return err
		}
		c, ok := ts.col(n)
		if !ok {
			return fmt.Errorf("%w: %s on shard %s: primary key column %s is generated", ErrSchema, t.Name, shard, n)
		}
		ts.pk = append(ts.pk, c)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(ts.pk) == 0 {
		return fmt.Errorf("%w: %s on shard %s has no primary key", ErrSchema, t.Name, shard)
	}
	return nil
}

// describe reads t from db's catalog.
func describe(ctx context.Context, db *sql.DB, shard string, t Table) (*tableSide, error) {
	var (
		oid                      sql.NullInt64
		nsp, name, kind, replica string
	)
	err := db.QueryRowContext(ctx, `SELECT c.oid::int8, n.nspname, c.relname, c.relkind::text, c.relreplident::text
 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`, t.Name).Scan(&oid, &nsp, &name, &kind, &replica)
	if err == sql.ErrNoRows {
		return nil, fmt.Errorf("%w: table %q does not exist on shard %s", ErrSchema, t.Name, shard)
	}
	if err != nil {
		return nil, fmt.Errorf("reshard: shard %s: describe %s: %w", shard, t.Name, err)
	}
	switch kind {
	case "r":
	case "p":
		return nil, fmt.Errorf("%w: %s on shard %s is partitioned (decoding names the partitions)", ErrSchema, t.Name, shard)
	default:
		return nil, fmt.Errorf("%w: %s on shard %s is not a table (relkind %s)", ErrSchema, t.Name, shard, kind)
	}
	ts := &tableSide{rel: relName{nsp, name}, qname: quoteIdent(nsp) + "." + quoteIdent(name)}
	rows, err := db.QueryContext(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attgenerated <> '', a.attidentity = 'a'
 FROM pg_attribute a WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, oid.Int64)
	if err != nil {
		return nil, fmt.Errorf("reshard: shard %s: columns of %s: %w", shard, t.Name, err)
	}
	for rows.Next() {
		var c column
		var generated, always bool
		if err := rows.Scan(&c.name, &c.typ, &generated, &always); err != nil {
			rows.Close()
			return nil, err
		}
		if generated {
			continue
		}
		ts.always = ts.always || always
		ts.cols = append(ts.cols, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	err = ts.readPrimaryKey(ctx, db, shard, t, `SELECT a.attname FROM pg_index i
 CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
 WHERE i.indrelid = $1::oid AND i.indisprimary ORDER BY k.ord`, oid.Int64)
	if err != nil {
		return nil, err
	}
	if replica != "d" && replica != "f" {
		return nil, fmt.Errorf("%w: %s on shard %s: REPLICA IDENTITY must be DEFAULT (the primary key) or FULL, so that deletes carry the key", ErrSchema, t.Name, shard)
	}
	key, ok := ts.col(t.Key)
	if !ok {
		return nil, fmt.Errorf("%w: %s on shard %s has no column %s", ErrSchema, t.Name, shard, t.Key)
	}
	if key.typ != "bigint" && key.typ != "integer" && key.typ != "smallint" {
		return nil, fmt.Errorf("%w: %s on shard %s: key column %s is %s, want an integer", ErrSchema, t.Name, shard, t.Key, key.typ)
	}
	ts.key = key
	return ts, nil
}

// movingTable is a sharded table of one move: its source and target sides
// and the statements the mover runs on it.
type movingTable struct {
	cfg      Table
	src, dst *tableSide
	// cols are the columns copied, in the target's order; pkIdx the
	// positions of the primary key's columns in cols.
	cols  []string
	pkIdx []int
	ops   tableOps
}

// pair checks that src and dst describe the same table and builds the
// statements.
func pair(eng engine, t Table, src, dst *tableSide, nb int) (*movingTable, error) {
	names := func(cs []column) []string {
		out := make([]string, len(cs))
		for i, c := range cs {
			out[i] = c.name
		}
		return out
	}
	sc, dc := names(src.cols), names(dst.cols)
	s1, d1 := slices.Clone(sc), slices.Clone(dc)
	slices.Sort(s1)
	slices.Sort(d1)
	if !slices.Equal(s1, d1) {
		return nil, fmt.Errorf("%w: %s: the columns differ between the source (%s) and the target (%s)", ErrSchema, t.Name, strings.Join(sc, ", "), strings.Join(dc, ", "))
	}
	if !slices.Equal(names(src.pk), names(dst.pk)) {
		return nil, fmt.Errorf("%w: %s: the primary keys differ between the source (%s) and the target (%s)", ErrSchema, t.Name, strings.Join(names(src.pk), ", "), strings.Join(names(dst.pk), ", "))
	}
	mt := &movingTable{cfg: t, src: src, dst: dst, cols: dc}
	for _, p := range dst.pk {
		mt.pkIdx = append(mt.pkIdx, slices.Index(dc, p.name))
	}
	mt.ops = eng.ops(mt, nb)
	return mt, nil
}
