package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// tableSQL holds one moving table's statements. Values cross between the
// shards as text (each column's output text on the source, cast back to the
// target's type with its input function), which is exact for every type
// whose input reads its output (numeric, json, arrays, bytea in hex,
// timestamps under the mover's DateStyle and TimeZone, NULLs as NULL).
// $b is always the moving buckets (int4[]).
type tableSQL struct {
	// On the source.
	chunkFirst, chunkAfter string // $1 buckets, $2 limit, (after) $3.. the last key
	readByKey              string // $1.. key arrays, $n buckets: cols as text + in a moving bucket
	// On the target.
	upsert     string // $1.. one text[] per column, $n buckets
	foreign    string // $1.. key arrays, $n buckets: keys used outside the moving buckets
	deleteKeys string // $1.. key arrays, $n buckets
	// Keyset reads of the keys of the moving buckets and deletes by key,
	// for the cleanup (source) and the rollback (target).
	srcKeysFirst, srcKeysAfter, srcDelete string
	dstKeysFirst, dstKeysAfter            string
	// Per-bucket row count and checksum.
	srcVerify, dstVerify string
}

func bucketExpr(alias, key string, nb int) string {
	if alias != "" {
		alias += "."
	}
	return fmt.Sprintf("(%s%s %% %d)::int4", alias, quoteIdent(key), nb)
}

func list(n int, f func(i int) string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = f(i)
	}
	return strings.Join(parts, ", ")
}

// keysIn is "(k1, k2) IN (SELECT u.a1::t1, ... FROM unnest($s::text[], ...) AS u(a1, ...))"
// with parameters from $start.
func keysIn(alias string, pk []column, start int) string {
	if alias != "" {
		alias += "."
	}
	return fmt.Sprintf("(%s) IN (SELECT %s FROM unnest(%s) AS u(%s))",
		list(len(pk), func(i int) string { return alias + quoteIdent(pk[i].name) }),
		list(len(pk), func(i int) string { return fmt.Sprintf("u.a%d::%s", i+1, pk[i].typ) }),
		list(len(pk), func(i int) string { return fmt.Sprintf("$%d::text[]", start+i) }),
		list(len(pk), func(i int) string { return fmt.Sprintf("a%d", i+1) }))
}

// keyAfter is "(k1, k2) > ($s::t1, $s+1::t2)".
func keyAfter(pk []column, start int) string {
	return fmt.Sprintf("(%s) > (%s)",
		list(len(pk), func(i int) string { return quoteIdent(pk[i].name) }),
		list(len(pk), func(i int) string { return fmt.Sprintf("$%d::%s", start+i, pk[i].typ) }))
}

// orderBy is the primary key qualified with the table's alias r: a bare
// name would be the select list's column of that name, its text.
func orderBy(pk []column) string {
	return list(len(pk), func(i int) string { return "r." + quoteIdent(pk[i].name) })
}

func buildSQL(mt *movingTable, nb int) tableSQL {
	var s tableSQL
	src, dst := mt.src, mt.dst
	textCols := list(len(mt.cols), func(i int) string { return quoteIdent(mt.cols[i]) + "::text" })
	srcBucket := bucketExpr("", src.key.name, nb)
	dstBucket := bucketExpr("", dst.key.name, nb)
	nk := len(dst.pk)

	s.chunkFirst = fmt.Sprintf("SELECT %s FROM %s AS r WHERE %s = ANY($1::int4[]) ORDER BY %s LIMIT $2",
		textCols, src.qname, srcBucket, orderBy(src.pk))
	s.chunkAfter = fmt.Sprintf("SELECT %s FROM %s AS r WHERE %s = ANY($1::int4[]) AND %s ORDER BY %s LIMIT $2",
		textCols, src.qname, srcBucket, keyAfter(src.pk, 3), orderBy(src.pk))
	s.readByKey = fmt.Sprintf("SELECT %s, (%s = ANY($%d::int4[])) IS TRUE FROM %s WHERE %s",
		textCols, srcBucket, nk+1, src.qname, keysIn("", src.pk, 1))

	// The upsert overwrites a row of the target only in a moving bucket;
	// a conflict with a row outside them updates nothing, which the row
	// count shows (and foreign names).
	var nonKey []string
	for _, c := range mt.cols {
		if !slices.ContainsFunc(dst.pk, func(p column) bool { return p.name == c }) {
			nonKey = append(nonKey, c)
		}
	}
	set := fmt.Sprintf("%s = EXCLUDED.%s", quoteIdent(dst.pk[0].name), quoteIdent(dst.pk[0].name))
	if len(nonKey) > 0 {
		set = fmt.Sprintf("(%s) = ROW(%s)",
			list(len(nonKey), func(i int) string { return quoteIdent(nonKey[i]) }),
			list(len(nonKey), func(i int) string { return "EXCLUDED." + quoteIdent(nonKey[i]) }))
	}
	overriding := ""
	if dst.always {
		overriding = " OVERRIDING SYSTEM VALUE"
	}
	s.upsert = fmt.Sprintf("INSERT INTO %s AS t (%s)%s SELECT %s FROM unnest(%s) AS u(%s) ON CONFLICT (%s) DO UPDATE SET %s WHERE %s = ANY($%d::int4[])",
		dst.qname,
		list(len(mt.cols), func(i int) string { return quoteIdent(mt.cols[i]) }),
		overriding,
		list(len(mt.cols), func(i int) string {
			c, _ := dst.col(mt.cols[i])
			return fmt.Sprintf("u.a%d::%s", i+1, c.typ)
		}),
		list(len(mt.cols), func(i int) string { return fmt.Sprintf("$%d::text[]", i+1) }),
		list(len(mt.cols), func(i int) string { return fmt.Sprintf("a%d", i+1) }),
		list(len(dst.pk), func(i int) string { return quoteIdent(dst.pk[i].name) }), set, bucketExpr("t", dst.key.name, nb), len(mt.cols)+1)
	s.foreign = fmt.Sprintf("SELECT %s, %s::text FROM %s WHERE %s AND (%s = ANY($%d::int4[])) IS NOT TRUE LIMIT 10",
		list(nk, func(i int) string { return quoteIdent(dst.pk[i].name) + "::text" }),
		quoteIdent(dst.key.name), dst.qname, keysIn("", dst.pk, 1), dstBucket, nk+1)
	s.deleteKeys = fmt.Sprintf("DELETE FROM %s WHERE %s AND %s = ANY($%d::int4[])",
		dst.qname, keysIn("", dst.pk, 1), dstBucket, nk+1)

	keys := func(side *tableSide, after bool) string {
		bucket := bucketExpr("", side.key.name, nb)
		cond := ""
		if after {
			cond = " AND " + keyAfter(side.pk, 3)
		}
		return fmt.Sprintf("SELECT %s FROM %s AS r WHERE %s = ANY($1::int4[])%s ORDER BY %s LIMIT $2",
			list(len(side.pk), func(i int) string { return quoteIdent(side.pk[i].name) + "::text" }),
			side.qname, bucket, cond, orderBy(side.pk))
	}
	s.srcKeysFirst, s.srcKeysAfter = keys(src, false), keys(src, true)
	s.dstKeysFirst, s.dstKeysAfter = keys(dst, false), keys(dst, true)
	s.srcDelete = fmt.Sprintf("DELETE FROM %s WHERE %s AND %s = ANY($%d::int4[])",
		src.qname, keysIn("", src.pk, 1), srcBucket, nk+1)

	// The checksum: the sum of the first 64 bits of the md5 of each row's
	// text (its columns in name order, so both sides agree whatever their
	// column order), order-independent.
	sorted := slices.Clone(mt.cols)
	slices.Sort(sorted)
	verify := func(side *tableSide) string {
		bucket := bucketExpr("", side.key.name, nb)
		return fmt.Sprintf("SELECT %s, count(*), coalesce(sum(('x' || left(md5(ROW(%s)::text), 16))::bit(64)::int8::numeric), 0)::text FROM %s WHERE %s = ANY($1::int4[]) GROUP BY 1",
			bucket, list(len(sorted), func(i int) string { return quoteIdent(sorted[i]) }), side.qname, bucket)
	}
	s.srcVerify, s.dstVerify = verify(src), verify(dst)
	return s
}

// pgOps runs a moving table's statements on PostgreSQL: every key and
// row crosses as text[] parameters (one per column), unnested.
type pgOps struct {
	mt  *movingTable
	sql tableSQL
}

func (o *pgOps) readChunk(ctx context.Context, q querier, buckets []int, last []sql.NullString, limit int) ([][]*string, error) {
	args := []any{int32s(buckets), limit}
	query := o.sql.chunkFirst
	if len(last) > 0 {
		query = o.sql.chunkAfter
		for _, l := range last {
			args = append(args, l)
		}
	}
	return textRows(ctx, q, len(o.mt.cols), query, args...)
}

func (o *pgOps) readByKey(ctx context.Context, q querier, keys [][]string, buckets []int) ([][]*string, []bool, error) {
	n := len(o.mt.cols)
	rows, err := textRows(ctx, q, n+1, o.sql.readByKey, append(keyArrays(keys, len(o.mt.pkIdx)), int32s(buckets))...)
	if err != nil {
		return nil, nil, err
	}
	moving := make([]bool, len(rows))
	for i, r := range rows {
		moving[i] = deref(r[n]) == "true"
		rows[i] = r[:n]
	}
	return rows, moving, nil
}

// upsert writes rows; a conflict with a row outside the moving buckets
// updates nothing, which the row count shows, and foreign names.
func (o *pgOps) upsert(ctx context.Context, tx *sql.Tx, dst string, rows [][]*string, buckets []int) error {
	t := o.mt
	args := append(columns(rows, seq(len(t.cols))), int32s(buckets))
	res, err := tx.ExecContext(ctx, o.sql.upsert, args...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == int64(len(rows)) {
		return nil
	}
	args = append(columns(rows, t.pkIdx), int32s(buckets))
	foreign, err := textRows(ctx, tx, len(t.pkIdx)+1, o.sql.foreign, args...)
	if err != nil {
		return err
	}
	if len(foreign) == 0 {
		return fmt.Errorf("reshard: %s: %d of %d rows written on %s and no conflicting row found", t.cfg.Name, n, len(rows), dst)
	}
	return foreignRowError(t, dst, foreign)
}

func (o *pgOps) keys(ctx context.Context, q querier, onSource bool, buckets []int, last []*string, limit int) ([][]*string, error) {
	first, after, nk := o.sql.dstKeysFirst, o.sql.dstKeysAfter, len(o.mt.dst.pk)
	if onSource {
		first, after = o.sql.srcKeysFirst, o.sql.srcKeysAfter
	}
	query, args := first, []any{int32s(buckets), limit}
	if last != nil {
		query = after
		for _, l := range last {
			args = append(args, l)
		}
	}
	return textRows(ctx, q, nk, query, args...)
}

func (o *pgOps) deleteKeys(ctx context.Context, q querier, onSource bool, keys [][]*string, buckets []int) error {
	del := o.sql.deleteKeys
	if onSource {
		del = o.sql.srcDelete
	}
	_, err := q.ExecContext(ctx, del, append(columns(keys, seq(len(o.mt.pkIdx))), int32s(buckets))...)
	return err
}

func (o *pgOps) sums(ctx context.Context, q querier, onSource bool, buckets []int) (map[int]bucketSum, error) {
	query := o.sql.dstVerify
	if onSource {
		query = o.sql.srcVerify
	}
	return scanSums(q.QueryContext(ctx, query, int32s(buckets)))
}
