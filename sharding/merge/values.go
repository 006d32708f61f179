package merge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"
)

// Comparing and combining the driver values of merged rows. Values are
// what database/sql hands out for a `*any` destination: int64, float64,
// bool, string, []byte, time.Time or nil (pgx returns NUMERIC as its
// decimal text, which is compared and added as a decimal here).

// valKind says how a column's string values compare.
type valKind uint8

const (
	kindOther     valKind = iota
	kindText              // collation-dependent text
	kindPadded            // PostgreSQL bpchar (char(n)): text whose trailing spaces are not compared
	kindNumeric           // decimal text
	kindBytes             // strings compared as bytes (uuid)
	kindUnordered         // values whose order is not their bytes' (MySQL ENUM, SET)
)

func kindOf(dbType string) valKind {
	switch strings.ToUpper(dbType) {
	case "BPCHAR":
		// PostgreSQL's char(n): returned padded with spaces to n
		// characters, compared with trailing spaces removed (so 'a' sorts
		// before 'a\t', whose padded bytes sort first). MariaDB and MySQL
		// return CHAR with its trailing spaces removed: plain text.
		return kindPadded
	case "TEXT", "VARCHAR", "CHAR", "NAME", "TINYTEXT", "MEDIUMTEXT", "LONGTEXT":
		return kindText
	case "ENUM", "SET":
		return kindUnordered
	case "NUMERIC", "DECIMAL":
		return kindNumeric
	case "UUID":
		return kindBytes
	}
	return kindOther
}

// comparer compares values of the merged columns. coll tells whether the
// shards sort text in byte order (collation C) and compare it for
// equality by its bytes; when not, ordering (or grouping) text is an
// error rather than a wrong answer.
type comparer struct {
	kinds []valKind
	types []string
	coll  Collation
	// exprs: per column, the expression that computes it ("" for a plain
	// column): its text compares under coll.Expr.
	exprs []string
	// rank sorts a column's text as the shards do (rank.go; nil: the
	// shards cannot); ranks holds, per column, the ranks of its values
	// when it was needed.
	rank  ranker
	ranks map[int]map[string]int
}

// collOf is the collation column c's text compares by: the columns'
// collation, or, for a column computed by an expression, coll.Expr (its
// Why naming the expression).
func (m *comparer) collOf(c int) Collation {
	if c < 0 || c >= len(m.exprs) || m.exprs[c] == "" || m.coll.Expr == nil {
		return m.coll
	}
	e := *m.coll.Expr
	if !e.Order || !e.Equal {
		e.Why = m.exprs[c] + ": " + e.Why
	}
	return e
}

// anyExprColl is the strictest collation of the text columns (HAVING
// compares operands whose columns it does not track).
func (m *comparer) anyExprColl() Collation {
	for c := range m.exprs {
		if m.exprs[c] != "" && isText(m.kind(c)) {
			return m.collOf(c)
		}
	}
	return m.coll
}

// isText: values of kind k compare by the shards' text collation.
func isText(k valKind) bool { return k == kindText || k == kindPadded }

// trimPad removes the trailing spaces a bpchar value is compared
// without.
func trimPad(s string) string { return strings.TrimRight(s, " ") }

// kind is column c's kind.
func (m *comparer) kind(c int) valKind {
	if c >= 0 && c < len(m.kinds) {
		return m.kinds[c]
	}
	return kindOther
}

// equalText refuses, when the shards' text equality is not byte
// equality, grouping or de-duplicating by the text columns of cols.
func (m *comparer) equalText(what string, cols []int) error {
	for _, c := range cols {
		if coll := m.collOf(c); !coll.Equal && isText(m.kind(c)) {
			return fmt.Errorf("%s by text across shards: %s", what, coll.Why)
		}
	}
	return nil
}

// cmp compares two non-NULL values of column c.
func (m *comparer) cmp(c int, a, b any) (int, error) {
	switch x := a.(type) {
	case int64:
		switch y := b.(type) {
		case int64:
			return cmpOrdered(x, y), nil
		case float64:
			return cmpFloat(float64(x), y), nil
		}
	case float64:
		switch y := b.(type) {
		case float64:
			return cmpFloat(x, y), nil
		case int64:
			return cmpFloat(x, float64(y)), nil
		}
	case bool:
		if y, ok := b.(bool); ok {
			switch {
			case x == y:
				return 0, nil
			case !x:
				return -1, nil
			}
			return 1, nil
		}
	case time.Time:
		if y, ok := b.(time.Time); ok {
			return x.Compare(y), nil
		}
	case []byte:
		if y, ok := b.([]byte); ok {
			if c, ok, err := m.cmpRanked(c, x, y); ok {
				return c, err
			}
			switch m.kind(c) {
			case kindText, kindPadded: // MySQL drivers return text as bytes
				if coll := m.collOf(c); !coll.Order {
					return 0, fmt.Errorf("ordering text across shards: %s", coll.Why)
				}
				if m.kind(c) == kindPadded {
					return bytes.Compare(bytes.TrimRight(x, " "), bytes.TrimRight(y, " ")), nil
				}
			case kindUnordered:
				return 0, fmt.Errorf("ordering values of type %s across shards", m.typeName(c))
			}
			return bytes.Compare(x, y), nil
		}
	case string:
		y, ok := b.(string)
		if !ok {
			break
		}
		switch m.kind(c) {
		case kindNumeric:
			rx, err := parseDecimal(x)
			if err != nil {
				return 0, err
			}
			ry, err := parseDecimal(y)
			if err != nil {
				return 0, err
			}
			return rx.Cmp(ry), nil
		case kindBytes:
			return strings.Compare(x, y), nil
		case kindText:
			if c, ok, err := m.cmpRanked(c, x, y); ok {
				return c, err
			}
			if coll := m.collOf(c); !coll.Order {
				return 0, fmt.Errorf("ordering text across shards: %s", coll.Why)
			}
			return strings.Compare(x, y), nil
		case kindPadded:
			if coll := m.collOf(c); !coll.Order {
				return 0, fmt.Errorf("ordering text across shards: %s", coll.Why)
			}
			return strings.Compare(trimPad(x), trimPad(y)), nil
		}
		return 0, fmt.Errorf("ordering values of type %s across shards", m.typeName(c))
	}
	return 0, fmt.Errorf("comparing %T with %T across shards", a, b)
}

func (m *comparer) typeName(c int) string {
	if c < len(m.types) && m.types[c] != "" {
		return m.types[c]
	}
	return "unknown"
}

func cmpOrdered[T int64 | string](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// cmpFloat orders NaN above every number, as PostgreSQL does.
func cmpFloat(a, b float64) int {
	an, bn := math.IsNaN(a), math.IsNaN(b)
	switch {
	case an && bn:
		return 0
	case an:
		return 1
	case bn:
		return -1
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// parseDecimal parses PostgreSQL's numeric text; NaN and infinities are
// refused.
func parseDecimal(s string) (*big.Rat, error) {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil, fmt.Errorf("numeric value %q cannot be merged", s)
	}
	return r, nil
}

func decimalScale(s string) int {
	if i := strings.IndexByte(s, '.'); i >= 0 {
		j := len(s)
		if e := strings.IndexAny(s, "eE"); e > i {
			j = e
		}
		return j - i - 1
	}
	return 0
}

// addValues adds two partial sums (SUM or COUNT) of one column.
func addValues(a, b any) (any, error) {
	if a == nil {
		return b, nil
	}
	if b == nil {
		return a, nil
	}
	switch x := a.(type) {
	case int64:
		if y, ok := b.(int64); ok {
			s := x + y
			if (s > x) != (y > 0) {
				return nil, fmt.Errorf("integer overflow adding %d and %d", x, y)
			}
			return s, nil
		}
	case float64:
		switch y := b.(type) {
		case float64:
			return x + y, nil
		case int64:
			return x + float64(y), nil
		}
	}
	// Decimal text (numeric), possibly mixed with integers.
	ra, sa, err := toDecimal(a)
	if err != nil {
		return nil, err
	}
	rb, sb, err := toDecimal(b)
	if err != nil {
		return nil, err
	}
	return ra.Add(ra, rb).FloatString(max(sa, sb)), nil
}

func toDecimal(v any) (*big.Rat, int, error) {
	switch x := v.(type) {
	case int64:
		return new(big.Rat).SetInt64(x), 0, nil
	case string:
		r, err := parseDecimal(x)
		return r, decimalScale(x), err
	case []byte:
		r, err := parseDecimal(string(x))
		return r, decimalScale(string(x)), err
	}
	return nil, 0, fmt.Errorf("cannot add %T values across shards", v)
}

// avgValue divides a combined SUM by a combined COUNT: float for float
// input, otherwise decimal text with at least 16 fractional digits (as
// PostgreSQL's numeric AVG).
func avgValue(sum, count any) (any, error) {
	n, ok := count.(int64)
	if !ok {
		return nil, fmt.Errorf("COUNT partial of type %T", count)
	}
	if sum == nil || n == 0 {
		return nil, nil
	}
	if f, ok := sum.(float64); ok {
		return f / float64(n), nil
	}
	r, scale, err := toDecimal(sum)
	if err != nil {
		return nil, err
	}
	r.Quo(r, new(big.Rat).SetInt64(n))
	return r.FloatString(max(16, scale)), nil
}

// groupKey encodes values for grouping: equal values, equal keys.
func groupKey(b *strings.Builder, v any, kind valKind) {
	switch x := v.(type) {
	case nil:
		b.WriteString("N|")
	case string:
		switch kind {
		case kindNumeric:
			if r, err := parseDecimal(x); err == nil {
				b.WriteString("D" + r.RatString() + "|")
				return
			}
		case kindPadded:
			x = trimPad(x)
		}
		fmt.Fprintf(b, "S%d:%s|", len(x), x)
	case []byte:
		if kind == kindPadded {
			x = bytes.TrimRight(x, " ")
		}
		fmt.Fprintf(b, "B%d:%s|", len(x), x)
	case time.Time:
		fmt.Fprintf(b, "T%d|", x.UnixNano())
	default:
		fmt.Fprintf(b, "%T:%v|", v, v)
	}
}

// addDistinct adds the values of one shard's json_agg(DISTINCT x) (a JSON
// array, or NULL for none) to set, keyed so that equal values collide:
// numbers by their exact value (1.0 = 1.00, as numeric equality), other
// values by their JSON text. A text value is refused when the shards'
// text equality is not byte equality (coll).
func addDistinct(set map[string]struct{}, v any, coll Collation) error {
	var text []byte
	switch x := v.(type) {
	case nil:
		return nil
	case string:
		text = []byte(x)
	case []byte:
		text = x
	default:
		return fmt.Errorf("count(DISTINCT): a %T partial", v)
	}
	var vals []json.RawMessage
	if err := json.Unmarshal(text, &vals); err != nil {
		return fmt.Errorf("count(DISTINCT): %w", err)
	}
	for _, raw := range vals {
		k := string(raw)
		if len(raw) > 0 && raw[0] == '"' && !coll.Equal {
			return fmt.Errorf("count(DISTINCT) of text across shards: %s", coll.Why)
		}
		if len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
			if r, err := parseDecimal(k); err == nil {
				k = "n" + r.RatString()
			}
		}
		set[k] = struct{}{}
	}
	return nil
}
