package reshard

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// mariaOps runs a moving table's statements on MariaDB. Values cross as
// text, like on PostgreSQL: each is read with the driver's binary
// protocol and written as its text (integers in decimal, doubles in the
// shortest form that reads back to the same value, FLOATs as the double
// they equal, DATETIME and TIMESTAMP
// as 'YYYY-MM-DD hh:mm:ss.ffffff' under the mover's time_zone of UTC,
// everything else as the server sends it), and the target converts the
// text to the column's type on assignment, which is exact. Key values in
// comparisons are typed (integers as integers, decimals and times cast to
// the column's type): MariaDB compares an integer column with a string
// as floating point, which is not exact past 2^53. Bucket numbers are
// literals (integers the Move validated).
type mariaOps struct {
	mt *movingTable
	nb int
}

// mariaBinary are the types whose values are bytes, not text.
var mariaBinary = map[string]bool{"binary": true, "varbinary": true, "tinyblob": true, "blob": true, "mediumblob": true, "longblob": true, "bit": true}

var mariaIntegers = map[string]bool{"tinyint": true, "smallint": true, "mediumint": true, "int": true, "integer": true, "bigint": true, "year": true}

var mariaPrecision = regexp.MustCompile(`\((\d+)(,\s*\d+)?\)`)

// mariaParam is the expression of a key parameter of column c.
func mariaParam(c column) string {
	switch base := strings.ToLower(c.base); base {
	case "decimal", "numeric":
		return "CAST(? AS DECIMAL" + mariaPrecision.FindString(c.typ) + ")"
	case "float", "double", "real":
		return "CAST(? AS DOUBLE)"
	case "date":
		return "CAST(? AS DATE)"
	case "datetime", "timestamp":
		return "CAST(? AS DATETIME(6))"
	case "time":
		return "CAST(? AS TIME(6))"
	}
	return "?"
}

// mariaArg is the argument for text s (nil: NULL) of column c.
func mariaArg(c column, s *string) any {
	if s == nil {
		return nil
	}
	base := strings.ToLower(c.base)
	switch {
	case mariaIntegers[base]:
		if strings.Contains(strings.ToLower(c.typ), "unsigned") {
			if n, err := strconv.ParseUint(*s, 10, 64); err == nil {
				return n
			}
		} else if n, err := strconv.ParseInt(*s, 10, 64); err == nil {
			return n
		}
	case mariaBinary[base]:
		return []byte(*s)
	}
	return *s
}

// mariaText is the text of a value the driver returned for column c.
func mariaText(v any, c column) (*string, error) {
	var s string
	switch x := v.(type) {
	case nil:
		return nil, nil
	case []byte:
		s = string(x)
	case string:
		s = x
	case int64:
		s = strconv.FormatInt(x, 10)
	case uint64:
		s = strconv.FormatUint(x, 10)
	case float64:
		s = strconv.FormatFloat(x, 'g', -1, 64)
	case float32:
		// The double it equals, not float32's shortest text: the server
		// reads the text as a double and checks FLOAT's range before it
		// rounds, so FLOAT's largest value, 3.4028235e38 in its shortest
		// text, would be out of range.
		s = strconv.FormatFloat(float64(x), 'g', -1, 64)
	case time.Time: // a DSN with parseTime=true
		switch {
		case strings.EqualFold(c.base, "date"):
			s = x.Format("2006-01-02")
		case x.IsZero():
			s = "0000-00-00 00:00:00"
		default:
			s = x.Format("2006-01-02 15:04:05.999999")
		}
	default:
		return nil, fmt.Errorf("reshard: column %s: unexpected value of type %T", c.name, v)
	}
	return &s, nil
}

// mariaRows reads rows whose first len(cols) columns are cols' values and
// the next extra ones integers (flags).
func mariaRows(rows *sql.Rows, cols []column, extra int) ([][]*string, [][]int64, error) {
	defer rows.Close()
	var out [][]*string
	var flags [][]int64
	n := len(cols)
	for rows.Next() {
		vals := make([]any, n)
		fl := make([]sql.NullInt64, extra)
		dest := make([]any, n+extra)
		for i := range vals {
			dest[i] = &vals[i]
		}
		for i := range fl {
			dest[n+i] = &fl[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, err
		}
		row := make([]*string, n)
		for i, v := range vals {
			t, err := mariaText(v, cols[i])
			if err != nil {
				return nil, nil, err
			}
			row[i] = t
		}
		out = append(out, row)
		if extra > 0 {
			f := make([]int64, extra)
			for i, x := range fl {
				f[i] = x.Int64
			}
			flags = append(flags, f)
		}
	}
	return out, flags, rows.Err()
}

func (o *mariaOps) side(onSource bool) *tableSide {
	if onSource {
		return o.mt.src
	}
	return o.mt.dst
}

// cols are the copied columns as side describes them, in cols' order.
func (o *mariaOps) cols(side *tableSide) []column {
	out := make([]column, len(o.mt.cols))
	for i, n := range o.mt.cols {
		out[i], _ = side.col(n)
	}
	return out
}

// inBuckets is "(key % n) IN (b, ...)".
func (o *mariaOps) inBuckets(side *tableSide, alias string, buckets []int) string {
	if alias != "" {
		alias += "."
	}
	bs := make([]string, len(buckets))
	for i, b := range buckets {
		bs[i] = strconv.Itoa(b)
	}
	return fmt.Sprintf("(%s%s %% %d) IN (%s)", alias, mquote(side.key.name), o.nb, strings.Join(bs, ", "))
}

func mariaList(n int, f func(i int) string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = f(i)
	}
	return strings.Join(parts, ", ")
}

// pkList is the primary key's columns, quoted.
func pkList(side *tableSide) string {
	return mariaList(len(side.pk), func(i int) string { return mquote(side.pk[i].name) })
}

// keysIn is "k IN (?, ...)" or "(k1, k2) IN ((?, ?), ...)" for keys
// (rows of key values as text), and its arguments.
func keysInMaria(side *tableSide, keys [][]*string) (string, []any) {
	pk := side.pk
	var args []any
	tuple := func() string {
		return mariaList(len(pk), func(i int) string { return mariaParam(pk[i]) })
	}
	items := make([]string, len(keys))
	for i, k := range keys {
		if len(pk) == 1 {
			items[i] = tuple()
		} else {
			items[i] = "(" + tuple() + ")"
		}
		for j, c := range pk {
			args = append(args, mariaArg(c, k[j]))
		}
	}
	if len(pk) == 1 {
		return fmt.Sprintf("%s IN (%s)", mquote(pk[0].name), strings.Join(items, ", ")), args
	}
	return fmt.Sprintf("(%s) IN (%s)", pkList(side), strings.Join(items, ", ")), args
}

// keyAfterMaria is "the primary key is after last", written so that an
// index range serves it: c1 >= ? AND (c1 > ? OR (c1 = ? AND (c2 > ? ...))).
func keyAfterMaria(side *tableSide, last []*string) (string, []any) {
	pk := side.pk
	var args []any
	var rec func(i int) string
	rec = func(i int) string {
		c := pk[i]
		p := mariaParam(c)
		args = append(args, mariaArg(c, last[i]))
		if i == len(pk)-1 {
			return fmt.Sprintf("%s > %s", mquote(c.name), p)
		}
		args = append(args, mariaArg(c, last[i]))
		return fmt.Sprintf("(%s > %s OR (%s = %s AND %s))", mquote(c.name), p, mquote(c.name), p, rec(i+1))
	}
	first := pk[0]
	args = append(args, mariaArg(first, last[0]))
	return fmt.Sprintf("%s >= %s AND %s", mquote(first.name), mariaParam(first), rec(0)), args
}

// perStatement is how many rows or keys one statement carries: at most
// 1000, and at most about 30,000 parameters (the protocol allows 65,535).
func perStatement(width int) int { return max(1, min(1000, 30000/max(1, width))) }

// inChunks calls f on consecutive parts of n items of width parameters
// each.
func inChunks(n, width int, f func(lo, hi int) error) error {
	per := perStatement(width)
	for lo := 0; lo < n; lo += per {
		if err := f(lo, min(n, lo+per)); err != nil {
			return err
		}
	}
	return nil
}

func (o *mariaOps) readChunk(ctx context.Context, q querier, buckets []int, last []sql.NullString, limit int) ([][]*string, error) {
	src := o.mt.src
	cols := o.cols(src)
	where := o.inBuckets(src, "", buckets)
	var args []any
	if len(last) > 0 {
		after, a := keyAfterMaria(src, nullStrings(last))
		where += " AND " + after
		args = a
	}
	args = append(args, limit)
	rows, err := q.QueryContext(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT ?",
		mariaList(len(cols), func(i int) string { return mquote(cols[i].name) }), src.qname, where, pkList(src)), args...)
	if err != nil {
		return nil, err
	}
	out, _, err := mariaRows(rows, cols, 0)
	return out, err
}

func (o *mariaOps) readByKey(ctx context.Context, q querier, keys [][]string, buckets []int) ([][]*string, []bool, error) {
	src := o.mt.src
	cols := o.cols(src)
	ptrs := make([][]*string, len(keys))
	for i, k := range keys {
		ptrs[i] = make([]*string, len(k))
		for j := range k {
			ptrs[i][j] = &k[j]
		}
	}
	var out [][]*string
	var moving []bool
	err := inChunks(len(keys), len(src.pk), func(lo, hi int) error {
		in, args := keysInMaria(src, ptrs[lo:hi])
		rows, err := q.QueryContext(ctx, fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s",
			mariaList(len(cols), func(i int) string { return mquote(cols[i].name) }), o.inBuckets(src, "", buckets), src.qname, in), args...)
		if err != nil {
			return err
		}
		rs, flags, err := mariaRows(rows, cols, 1)
		if err != nil {
			return err
		}
		out = append(out, rs...)
		for _, f := range flags {
			moving = append(moving, f[0] == 1)
		}
		return nil
	})
	return out, moving, err
}

// upsert first looks for rows of the target outside the moving buckets
// with the keys of rows (locking them, and the gaps where they would be,
// until tx ends: none can appear meanwhile): any is ErrForeignRow. Then
// it inserts the rows, or overwrites the target's rows with their keys;
// the overwrite still checks that the row it replaces is in a moving
// bucket (the shard key column is assigned last, so every condition sees
// the row's old bucket).
func (o *mariaOps) upsert(ctx context.Context, tx *sql.Tx, dstName string, rows [][]*string, buckets []int) error {
	mt, dst := o.mt, o.mt.dst
	cols := o.cols(dst)
	keys := make([][]*string, len(rows))
	for i, r := range rows {
		keys[i] = make([]*string, len(mt.pkIdx))
		for j, c := range mt.pkIdx {
			keys[i][j] = r[c]
		}
	}
	var foreign [][]*string
	err := inChunks(len(keys), len(dst.pk), func(lo, hi int) error {
		in, args := keysInMaria(dst, keys[lo:hi])
		rs, err := tx.QueryContext(ctx, fmt.Sprintf("SELECT %s, %s, %s FROM %s WHERE %s FOR UPDATE",
			pkList(dst), mquote(dst.key.name), o.inBuckets(dst, "", buckets), dst.qname, in), args...)
		if err != nil {
			return err
		}
		found, flags, err := mariaRows(rs, append(append([]column{}, dst.pk...), dst.key), 1)
		if err != nil {
			return err
		}
		for i, f := range found {
			if flags[i][0] != 1 && len(foreign) < 10 {
				foreign = append(foreign, f)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(foreign) > 0 {
		return foreignRowError(mt, dstName, foreign)
	}
	isKey := func(n string) bool {
		for _, p := range dst.pk {
			if p.name == n {
				return true
			}
		}
		return false
	}
	var set []string
	var keyCol string
	cond := o.inBuckets(dst, "", buckets)
	for _, c := range cols {
		switch {
		case isKey(c.name):
		case c.name == dst.key.name:
			keyCol = fmt.Sprintf("%[1]s = IF(%[2]s, VALUES(%[1]s), %[1]s)", mquote(c.name), cond)
		default:
			set = append(set, fmt.Sprintf("%[1]s = IF(%[2]s, VALUES(%[1]s), %[1]s)", mquote(c.name), cond))
		}
	}
	if keyCol != "" {
		set = append(set, keyCol)
	}
	if len(set) == 0 {
		set = []string{fmt.Sprintf("%[1]s = %[1]s", mquote(dst.pk[0].name))}
	}
	row := "(" + placeholders(len(cols)) + ")"
	return inChunks(len(rows), len(cols), func(lo, hi int) error {
		args := make([]any, 0, (hi-lo)*len(cols))
		for _, r := range rows[lo:hi] {
			for i, c := range cols {
				args = append(args, mariaArg(c, r[i]))
			}
		}
		_, err := tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (%s) VALUES %s ON DUPLICATE KEY UPDATE %s",
			dst.qname, mariaList(len(cols), func(i int) string { return mquote(cols[i].name) }),
			strings.TrimSuffix(strings.Repeat(row+", ", hi-lo), ", "), strings.Join(set, ", ")), args...)
		return err
	})
}

func (o *mariaOps) keys(ctx context.Context, q querier, onSource bool, buckets []int, last []*string, limit int) ([][]*string, error) {
	side := o.side(onSource)
	where := o.inBuckets(side, "", buckets)
	var args []any
	if last != nil {
		after, a := keyAfterMaria(side, last)
		where += " AND " + after
		args = a
	}
	args = append(args, limit)
	rows, err := q.QueryContext(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT ?", pkList(side), side.qname, where, pkList(side)), args...)
	if err != nil {
		return nil, err
	}
	out, _, err := mariaRows(rows, side.pk, 0)
	return out, err
}

func (o *mariaOps) deleteKeys(ctx context.Context, q querier, onSource bool, keys [][]*string, buckets []int) error {
	side := o.side(onSource)
	return inChunks(len(keys), len(side.pk), func(lo, hi int) error {
		in, args := keysInMaria(side, keys[lo:hi])
		_, err := q.ExecContext(ctx, fmt.Sprintf("DELETE FROM %s WHERE %s AND %s", side.qname, in, o.inBuckets(side, "", buckets)), args...)
		return err
	})
}

// deleteBuckets deletes every row of the moving buckets on the target
// (a TRUNCATE applied), in q.
func (o *mariaOps) deleteBuckets(ctx context.Context, q querier, buckets []int) error {
	dst := o.mt.dst
	_, err := q.ExecContext(ctx, fmt.Sprintf("DELETE FROM %s WHERE %s", dst.qname, o.inBuckets(dst, "", buckets)))
	return err
}

// sums: per bucket, the row count and the sum of the first 64 bits of the
// MD5 of each row's text (QUOTE of every column, NULL as the word NULL,
// in column name order so that both sides agree whatever their column
// order), summed as DECIMAL (exact), as text.
func (o *mariaOps) sums(ctx context.Context, q querier, onSource bool, buckets []int) (map[int]bucketSum, error) {
	side := o.side(onSource)
	sorted := append([]string{}, o.mt.cols...)
	slices.Sort(sorted)
	bucket := fmt.Sprintf("(%s %% %d)", mquote(side.key.name), o.nb)
	return scanSums(q.QueryContext(ctx, fmt.Sprintf("SELECT %s, COUNT(*), CAST(COALESCE(SUM(CAST(CONV(LEFT(MD5(CONCAT_WS(',', %s)), 16), 16, 10) AS UNSIGNED)), 0) AS CHAR) FROM %s WHERE %s GROUP BY 1",
		bucket, mariaList(len(sorted), func(i int) string { return "QUOTE(" + mquote(sorted[i]) + ")" }), side.qname, o.inBuckets(side, "", buckets))))
}
