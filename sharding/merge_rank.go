package sharding

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/freshread/freshread/sharding/merge"
)

// Ranking text for a merge (merge.TextRanker). A PostgreSQL column whose
// collation is deterministic but not byte order (an ICU or libc locale,
// declared on the column or the database's default) sorts otherwise than
// its bytes; the merge then asks one shard to sort the distinct values
// read from every shard under that collation, and merges by their ranks.
// That is exact when every shard has the same collation for the column
// (checked: the same name and schema, or for the database's default the
// same locale provider and locales) and the same collation library
// version, which the merge assumes, as a replica of the shard does.
// Refused (the merge then refuses the ORDER BY as before): MariaDB and
// MySQL shards, a read that joins another sharded table, a column not
// found, collations that differ between shards, nondeterministic ones.

var _ merge.TextRanker = (*mergeShards)(nil)

// RankText ranks values in the order the shards sort column of the read's
// table.
func (m *mergeShards) RankText(ctx context.Context, column string, values []string) (map[string]int, error) {
	s := m.s
	if m.tg.t == nil || len(m.tg.joined) > 0 {
		return nil, errors.New("sharding: text ranks only for a read of one table")
	}
	for _, i := range m.idx {
		if dialect(s.shards[i]) != "postgres" {
			return nil, errors.New("sharding: text ranks only on PostgreSQL")
		}
	}
	coll, err := s.rankCollation(ctx, m.tg.t.Name, column)
	if err != nil {
		return nil, err
	}
	q := "SELECT v FROM unnest(?::text[]) AS u(v) ORDER BY v"
	if coll != "" {
		q += " COLLATE " + coll
	}
	var sorted []string
	sh := s.shards[m.idx[0]]
	if err := sh.db.WithContext(ctx).Raw(q, textArray(values)).Scan(&sorted).Error; err != nil {
		return nil, fmt.Errorf("sharding: rank text on shard %q: %w", sh.name, err)
	}
	if len(sorted) != len(values) {
		return nil, fmt.Errorf("sharding: rank text on shard %q: %d values sorted of %d", sh.name, len(sorted), len(values))
	}
	ranks := make(map[string]int, len(sorted))
	for i, v := range sorted {
		ranks[v] = i
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

// rankCollation returns the COLLATE clause's collation (quoted, schema
// qualified) that column of table sorts by on every shard, "" for the
// databases' default; an error when the shards differ, the collation is
// nondeterministic, or the column is not found. Cached like the tables'
// collations.
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
// not be asked.
func (s *Sharding) readRankCollation(ctx context.Context, table, column string) (coll string, cache bool, _ error) {
	var first string
	for i, sh := range s.shards {
		sdb, err := sh.sqlDB()
		if err != nil {
			return "", false, err
		}
		var nsp, name, dbColl, dbProvider, dbLocale string
		var deterministic bool
		// The database's default: its provider, libc locale and ICU locale
		// (daticulocale in PostgreSQL 15 and 16, datlocale from 17).
		err = sdb.QueryRowContext(ctx, `SELECT n.nspname, c.collname, COALESCE((to_jsonb(c)->>'collisdeterministic')::bool, true),
  d.datcollate, COALESCE(to_jsonb(d)->>'datlocprovider', 'c'), COALESCE(to_jsonb(d)->>'datlocale', to_jsonb(d)->>'daticulocale', '')
FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation JOIN pg_namespace n ON n.oid = c.collnamespace,
  pg_database d
WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped AND d.datname = current_database()`,
			table, column).Scan(&nsp, &name, &deterministic, &dbColl, &dbProvider, &dbLocale)
		if err != nil {
			// A column not found stays not found for the cache's time.
			return "", errors.Is(err, sql.ErrNoRows), fmt.Errorf("sharding: shard %q: the collation of column %q of %q: %w", sh.name, column, table, err)
		}
		if !deterministic {
			return "", true, fmt.Errorf("sharding: shard %q: column %q of %q has a nondeterministic collation", sh.name, column, table)
		}
		spec := quoteIdent(nsp) + "." + quoteIdent(name)
		if name == "default" && nsp == "pg_catalog" {
			spec = "default:" + dbProvider + ":" + dbColl + ":" + dbLocale
		}
		switch {
		case i == 0:
			first = spec
		case spec != first:
			return "", true, fmt.Errorf("sharding: column %q of %q collates with %s on shard %q and %s on shard %q", column, table, spec, sh.name, first, s.shards[0].name)
		}
	}
	if strings.HasPrefix(first, "default:") {
		return "", true, nil
	}
	return first, true, nil
}

// quoteIdent quotes a PostgreSQL identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
