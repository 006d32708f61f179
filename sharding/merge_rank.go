package sharding

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/freshread/freshread/sharding/merge"
)

// Ranking text for a merge (merge.TextRanker). A column whose collation
// is not byte order (a PostgreSQL ICU or libc locale, on the column or the
// database's default; a MariaDB or MySQL _ci, _ai, UCA or PAD SPACE
// collation) sorts otherwise than its bytes; the merge then asks one shard
// to rank the distinct values read from every shard under that collation
// (a dense rank: values the collation calls equal share one), and merges
// by the ranks. That is exact when every shard has the same collation for
// the column (checked: PostgreSQL's by name and schema, or for the
// database's default its provider and locales; MariaDB's and MySQL's by
// name, character set and type) and the same collation library version,
// which the merge assumes, as a replica of the shard does. Refused (the
// merge then refuses as before): a read that joins another sharded table,
// a column not found, collations that differ between shards, MariaDB and
// MySQL CHAR(n) columns and character sets other than utf8.

var _ merge.TextRanker = (*mergeShards)(nil)

// RankText ranks values in the order the shards sort column of the read's
// table.
func (m *mergeShards) RankText(ctx context.Context, column string, values []string) (map[string]int, error) {
	s := m.s
	if m.tg.t == nil || len(m.tg.joined) > 0 {
		return nil, errors.New("sharding: text ranks only for a read of one table")
	}
	sh := s.shards[m.idx[0]]
	eng := dialect(sh)
	for _, i := range m.idx {
		if d := dialect(s.shards[i]); d != eng || (d != "postgres" && d != "mysql") {
			return nil, errors.New("sharding: text ranks only on shards of one engine, PostgreSQL, MariaDB or MySQL")
		}
	}
	coll, err := s.rankCollation(ctx, m.tg.t.Name, column)
	if err != nil {
		return nil, err
	}
	var q string
	var arg any
	if eng == "postgres" {
		q = "SELECT v, dense_rank() OVER (ORDER BY v" + coll + ") AS r FROM unnest(?::text[]) AS u(v)"
		arg = textArray(values)
	} else {
		js, err := json.Marshal(values)
		if err != nil {
			return nil, fmt.Errorf("sharding: rank text: %w", err)
		}
		q = "SELECT jt.v, DENSE_RANK() OVER (ORDER BY jt.v) AS r FROM JSON_TABLE(?, '$[*]' COLUMNS (v " + coll + " PATH '$')) AS jt"
		arg = string(js)
	}
	var ranked []struct {
		V string
		R int
	}
	if err := sh.db.WithContext(ctx).Raw(q, arg).Scan(&ranked).Error; err != nil {
		return nil, fmt.Errorf("sharding: rank text on shard %q: %w", sh.name, err)
	}
	ranks := make(map[string]int, len(ranked))
	for _, r := range ranked {
		ranks[r.V] = r.R
	}
	if len(ranks) != len(values) {
		return nil, fmt.Errorf("sharding: rank text on shard %q: %d values ranked of %d", sh.name, len(ranks), len(values))
	}
	return ranks, nil
}

// textArray is a PostgreSQL array literal of values (sent as a parameter).
func textArray(values []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range values {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// rankCollation returns how column of table collates on every shard, as
// RankText's query needs it (readRankCollation); an error when the shards
// differ or the column is not found or not ranked. Cached like the
// tables' collations.
func (s *Sharding) rankCollation(ctx context.Context, table, column string) (string, error) {
	key := table + "\x00" + column
	tc := &s.tcoll
	tc.mu.Lock()
	if e, ok := tc.rank[key]; ok && time.Since(e.at) < tableCollationTTL {
		tc.mu.Unlock()
		return e.coll, e.err
	}
	tc.mu.Unlock()
	coll, cache, err := s.readRankCollation(ctx, table, column)
	if cache {
		tc.mu.Lock()
		if tc.rank == nil {
			tc.rank = map[string]rankCollation{}
		}
		tc.rank[key] = rankCollation{coll: coll, err: err, at: time.Now()}
		tc.mu.Unlock()
	}
	return coll, err
}

// rankCollation is a cached answer of Sharding.rankCollation.
type rankCollation struct {
	coll string
	err  error
	at   time.Time
}

// readRankCollation asks every shard; cache is false when a shard could
// not be asked. The answer is what RankText puts in its query: for
// PostgreSQL " COLLATE <collation>" ("" for the database's default), for
// MariaDB and MySQL the JSON_TABLE column's type and collation.
func (s *Sharding) readRankCollation(ctx context.Context, table, column string) (coll string, cache bool, _ error) {
	var first, clause string
	for i, sh := range s.shards {
		spec, c, cache, err := rankSpec(ctx, sh, table, column)
		if err != nil {
			return "", cache, err
		}
		switch {
		case i == 0:
			first, clause = spec, c
		case spec != first:
			return "", true, fmt.Errorf("sharding: column %q of %q collates with %s on shard %q and %s on shard %q", column, table, spec, sh.name, first, s.shards[0].name)
		}
	}
	return clause, true, nil
}

// rankSpec reads how column of table collates on sh: spec compares
// between shards, clause goes into the ranking query.
func rankSpec(ctx context.Context, sh *shard, table, column string) (spec, clause string, cache bool, _ error) {
	sdb, err := sh.sqlDB()
	if err != nil {
		return "", "", false, err
	}
	fail := func(err error) (string, string, bool, error) {
		// A column not found stays not found for the cache's time.
		return "", "", errors.Is(err, sql.ErrNoRows), fmt.Errorf("sharding: shard %q: the collation of column %q of %q: %w", sh.name, column, table, err)
	}
	if dialect(sh) == "postgres" {
		var nsp, name, dbColl, dbProvider, dbLocale string
		// The database's default: its provider, libc locale and ICU locale
		// (daticulocale in PostgreSQL 15 and 16, datlocale from 17).
		err = sdb.QueryRowContext(ctx, `SELECT n.nspname, c.collname,
  d.datcollate, COALESCE(to_jsonb(d)->>'datlocprovider', 'c'), COALESCE(to_jsonb(d)->>'datlocale', to_jsonb(d)->>'daticulocale', '')
FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation JOIN pg_namespace n ON n.oid = c.collnamespace,
  pg_database d
WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped AND d.datname = current_database()`,
			table, column).Scan(&nsp, &name, &dbColl, &dbProvider, &dbLocale)
		if err != nil {
			return fail(err)
		}
		if name == "default" && nsp == "pg_catalog" {
			return "default:" + dbProvider + ":" + dbColl + ":" + dbLocale, "", true, nil
		}
		c := " COLLATE " + pgx.Identifier{nsp, name}.Sanitize()
		return c, c, true, nil
	}
	schemaName, name := "", table
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		schemaName, name = table[:i], table[i+1:]
	}
	var coll, charset, typ string
	var length sql.NullInt64
	err = sdb.QueryRowContext(ctx, `SELECT COLLATION_NAME, CHARACTER_SET_NAME, DATA_TYPE, CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME = ? AND COLLATION_NAME IS NOT NULL`, schemaName, name, column).Scan(&coll, &charset, &typ, &length)
	if err != nil {
		return fail(err)
	}
	typ = strings.ToLower(typ)
	ident := sqlWord
	switch {
	case !strings.HasPrefix(strings.ToLower(charset), "utf8"):
		return "", "", true, fmt.Errorf("sharding: shard %q: column %q of %q has character set %s (text is ranked in utf8 only)", sh.name, column, table, charset)
	case typ == "char" || !ident.MatchString(typ) || !ident.MatchString(strings.ToLower(coll)) || !ident.MatchString(strings.ToLower(charset)):
		return "", "", true, fmt.Errorf("sharding: shard %q: column %q of %q is %s %s, not ranked", sh.name, column, table, typ, coll)
	case typ == "varchar" && length.Valid:
		typ = fmt.Sprintf("varchar(%d)", length.Int64)
	case typ == "varchar":
		return "", "", true, fmt.Errorf("sharding: shard %q: column %q of %q has no length", sh.name, column, table)
	}
	c := typ + " CHARACTER SET " + charset + " COLLATE " + coll
	return c, c, true, nil
}

// sqlWord is a type, character set or collation name put in a query as
// it is.
var sqlWord = regexp.MustCompile(`^[a-z0-9_]+$`)
