package merge

import (
	"database/sql/driver"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"time"

	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/sharding/internal/sqltext"
)

// HAVING on merged groups. The condition is parsed into a small tree of
// AND/OR/NOT over comparisons whose operands are aggregates (COUNT, SUM,
// MIN, MAX, AVG; one not in the select list is added to the shards' select
// list as a hidden item), GROUP BY expressions, literals and bound
// parameters. The shards run the statement without HAVING, and the tree
// is evaluated on every merged group (SQL's three-valued logic: a group is
// kept only when the condition is true).

type havingOp uint8

const (
	hvAnd havingOp = iota + 1
	hvOr
	hvNot
	hvCmp    // kids: none; a, b operands; cmp the operator
	hvIsNull // a IS NULL (negated by hvNot for IS NOT NULL)
)

type havingNode struct {
	op   havingOp
	kids []*havingNode
	cmp  string // =, <>, <, <=, >, >=
	a, b havingOperand
}

// havingOperand is a merged-row column (col >= 0) or a constant. A GROUP
// BY column is first parsed as its index in groups (group >= 0) and
// placed after every item once the hidden ones are known.
type havingOperand struct {
	col   int
	group int
	val   any
	kind  valKind
}

// havingParser parses HAVING text for a plan.
type havingParser struct {
	p    *Plan
	sql  string
	toks []sqltext.Tok
	pos  int
	vars []any
	next int
	why  string
}

// planHaving parses the HAVING expressions (ANDed, as GORM writes them)
// and adds the aggregates they need to the select list as hidden items.
func (p *Plan) planHaving(exprs []clause.Expression) string {
	var nodes []*havingNode
	for _, e := range exprs {
		x, ok := e.(clause.Expr)
		if !ok {
			return fmt.Sprintf("HAVING with a %T condition (write it as text)", e)
		}
		hp := &havingParser{p: p, sql: x.SQL, toks: sqltext.Lex(x.SQL), vars: x.Vars}
		n := hp.parseOr()
		if hp.why == "" && hp.pos < len(hp.toks) {
			hp.fail("unexpected " + hp.toks[hp.pos].Text)
		}
		if hp.why == "" && hp.next != len(x.Vars) {
			hp.fail(fmt.Sprintf("%d parameters for %d placeholders", len(x.Vars), hp.next))
		}
		if hp.why != "" {
			return fmt.Sprintf("HAVING %s (%s; only comparisons of aggregates and GROUP BY columns with literals or parameters, with AND/OR/NOT, are merged)", x.SQL, hp.why)
		}
		nodes = append(nodes, n)
	}
	if len(nodes) == 1 {
		p.having = nodes[0]
	} else {
		p.having = &havingNode{op: hvAnd, kids: nodes}
	}
	p.having.placeGroups(len(p.items))
	return ""
}

// placeGroups points the GROUP BY operands at their merged columns, which
// follow the nItems items.
func (n *havingNode) placeGroups(nItems int) {
	for _, o := range []*havingOperand{&n.a, &n.b} {
		if o.group >= 0 && o.col < 0 {
			o.col = nItems + o.group
		}
	}
	for _, k := range n.kids {
		k.placeGroups(nItems)
	}
}

func (hp *havingParser) fail(why string) {
	if hp.why == "" {
		hp.why = why
	}
}

func (hp *havingParser) peek() sqltext.Tok {
	if hp.pos < len(hp.toks) {
		return hp.toks[hp.pos]
	}
	return sqltext.Tok{}
}

func (hp *havingParser) parseOr() *havingNode {
	n := hp.parseAnd()
	for hp.why == "" && hp.peek().Is("or") {
		hp.pos++
		n = &havingNode{op: hvOr, kids: []*havingNode{n, hp.parseAnd()}}
	}
	return n
}

func (hp *havingParser) parseAnd() *havingNode {
	n := hp.parseNot()
	for hp.why == "" && hp.peek().Is("and") {
		hp.pos++
		n = &havingNode{op: hvAnd, kids: []*havingNode{n, hp.parseNot()}}
	}
	return n
}

func (hp *havingParser) parseNot() *havingNode {
	if hp.peek().Is("not") {
		hp.pos++
		return &havingNode{op: hvNot, kids: []*havingNode{hp.parseNot()}}
	}
	if hp.peek().IsOp("(") {
		hp.pos++
		n := hp.parseOr()
		if !hp.peek().IsOp(")") {
			hp.fail("unbalanced parentheses or a parenthesised operand")
			return n
		}
		hp.pos++
		return n
	}
	return hp.parseCmp()
}

func (hp *havingParser) parseCmp() *havingNode {
	a := hp.operand()
	if hp.why != "" {
		return nil
	}
	t := hp.peek()
	if t.Is("is") {
		hp.pos++
		neg := false
		if hp.peek().Is("not") {
			neg = true
			hp.pos++
		}
		if !hp.peek().Is("null") {
			hp.fail("IS without NULL")
			return nil
		}
		hp.pos++
		n := &havingNode{op: hvIsNull, a: a}
		if neg {
			n = &havingNode{op: hvNot, kids: []*havingNode{n}}
		}
		return n
	}
	if t.Kind != sqltext.Op {
		hp.fail("expected a comparison after an operand")
		return nil
	}
	op := t.Text
	switch op {
	case "=", "<>", "<", "<=", ">", ">=":
	case "!=":
		op = "<>"
	default:
		hp.fail("operator " + op)
		return nil
	}
	hp.pos++
	b := hp.operand()
	if hp.why != "" {
		return nil
	}
	if a.col < 0 && a.group < 0 && b.col < 0 && b.group < 0 {
		hp.fail("a comparison of two constants")
	}
	return &havingNode{op: hvCmp, cmp: op, a: a, b: b}
}

// operand parses an aggregate call, a GROUP BY column, a literal or a
// parameter.
func (hp *havingParser) operand() havingOperand {
	t := hp.peek()
	switch {
	case t.Kind == sqltext.Number || t.IsOp("-") && hp.pos+1 < len(hp.toks) && hp.toks[hp.pos+1].Kind == sqltext.Number:
		neg := t.IsOp("-")
		if neg {
			hp.pos++
			t = hp.peek()
		}
		hp.pos++
		s := t.Text
		if neg {
			s = "-" + s
		}
		if _, ok := new(big.Rat).SetString(s); !ok {
			hp.fail("number " + s)
		}
		return havingOperand{col: -1, group: -1, val: s, kind: kindNumeric}
	case t.Kind == sqltext.String:
		hp.pos++
		return havingOperand{col: -1, group: -1, val: strings.ReplaceAll(t.Text, "''", "'"), kind: kindText}
	case t.Kind == sqltext.Param:
		hp.pos++
		idx := t.Param
		if idx < 0 {
			idx = hp.next
			hp.next++
		} else if idx+1 > hp.next {
			hp.next = idx + 1
		}
		if idx >= len(hp.vars) {
			hp.fail("a placeholder without a parameter")
			return havingOperand{col: -1, group: -1}
		}
		v, ok := havingValue(hp.vars[idx])
		if !ok {
			hp.fail(fmt.Sprintf("a parameter of type %T", hp.vars[idx]))
		}
		return havingOperand{col: -1, group: -1, val: v}
	case t.Is("true") || t.Is("false"):
		hp.pos++
		return havingOperand{col: -1, group: -1, val: t.Is("true")}
	case t.Kind == sqltext.Ident && hp.pos+1 < len(hp.toks) && hp.toks[hp.pos+1].IsOp("("):
		return hp.aggregate()
	case t.Kind == sqltext.Ident && !t.Is("null") && !t.Is("not"):
		hp.pos++
		for j, g := range hp.p.groups {
			if normExpr(g) == normExpr(t.Text) || lastPart(normExpr(g)) == lastPart(t.Text) && !strings.Contains(t.Text, ".") {
				return havingOperand{col: -1, group: j}
			}
		}
		hp.fail(t.Text + " is not a GROUP BY column")
		return havingOperand{col: -1, group: -1}
	}
	hp.fail("operand " + t.Text)
	return havingOperand{col: -1, group: -1}
}

// aggregate parses name(...) and returns the merged column of that
// aggregate: an item of the select list, or a hidden item added for it.
func (hp *havingParser) aggregate() havingOperand {
	start := hp.toks[hp.pos].Pos
	depth := 0
	i := hp.pos + 1
	for ; i < len(hp.toks); i++ {
		if hp.toks[i].IsOp("(") {
			depth++
		} else if hp.toks[i].IsOp(")") {
			depth--
			if depth == 0 {
				break
			}
		}
	}
	if i >= len(hp.toks) {
		hp.fail("unbalanced parentheses")
		return havingOperand{col: -1, group: -1}
	}
	for _, t := range hp.toks[hp.pos:i] {
		if t.Kind == sqltext.Param {
			hp.fail("a parameter inside an aggregate")
			return havingOperand{col: -1, group: -1}
		}
	}
	text := hp.sql[start:hp.toks[i].End]
	hp.pos = i + 1
	it, why := parseSelItem(text)
	if why != "" {
		hp.fail(why)
		return havingOperand{col: -1, group: -1}
	}
	if it.agg == "" {
		hp.fail("the function " + text)
		return havingOperand{col: -1, group: -1}
	}
	return havingOperand{col: hp.p.aggItem(it), group: -1}
}

// aggItem returns the index of the select item computing the aggregate
// it, adding a hidden one (after the visible items) when there is none.
func (p *Plan) aggItem(it selItem) int {
	for j, x := range p.items {
		if x.agg == it.agg && normExpr(x.arg) == normExpr(it.arg) {
			return j
		}
	}
	it.alias = fmt.Sprintf("__fr_h%d", len(p.items))
	it.text = it.expr + ` AS "` + it.alias + `"`
	p.items = append(p.items, it)
	return len(p.items) - 1
}

// havingValue converts a bound parameter to a driver value the merge can
// compare.
func havingValue(v any) (any, bool) {
	if vr, ok := v.(driver.Valuer); ok {
		x, err := vr.Value()
		if err != nil {
			return nil, false
		}
		v = x
	}
	switch x := v.(type) {
	case nil, string, bool, float64, int64, time.Time:
		return x, true
	case []byte:
		return string(x), true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u := rv.Uint()
		if u > 1<<63-1 {
			return new(big.Int).SetUint64(u).String(), true
		}
		return int64(u), true
	case reflect.Float32, reflect.Float64:
		return rv.Float(), true
	case reflect.String:
		return rv.String(), true
	case reflect.Bool:
		return rv.Bool(), true
	}
	return nil, false
}

// tri is SQL's three-valued truth.
type tri int8

const (
	triFalse tri = iota
	triTrue
	triUnknown
)

// eval evaluates the condition on a merged row; mc holds the kinds of the
// merged columns.
func (n *havingNode) eval(row []any, mc *comparer) (tri, error) {
	switch n.op {
	case hvAnd, hvOr:
		res := triTrue
		if n.op == hvOr {
			res = triFalse
		}
		for _, k := range n.kids {
			v, err := k.eval(row, mc)
			if err != nil {
				return 0, err
			}
			switch {
			case n.op == hvAnd && v == triFalse, n.op == hvOr && v == triTrue:
				return v, nil
			case v == triUnknown:
				res = triUnknown
			}
		}
		return res, nil
	case hvNot:
		v, err := n.kids[0].eval(row, mc)
		if err != nil || v == triUnknown {
			return v, err
		}
		return 1 - v, nil
	case hvIsNull:
		v, _ := n.a.value(row, mc)
		if v == nil {
			return triTrue, nil
		}
		return triFalse, nil
	}
	va, ka := n.a.value(row, mc)
	vb, kb := n.b.value(row, mc)
	if va == nil || vb == nil {
		return triUnknown, nil
	}
	c, err := compareHaving(va, ka, vb, kb, n.cmp == "=" || n.cmp == "<>", mc)
	if err != nil {
		return 0, fmt.Errorf("HAVING: %w", err)
	}
	var ok bool
	switch n.cmp {
	case "=":
		ok = c == 0
	case "<>":
		ok = c != 0
	case "<":
		ok = c < 0
	case "<=":
		ok = c <= 0
	case ">":
		ok = c > 0
	case ">=":
		ok = c >= 0
	}
	if ok {
		return triTrue, nil
	}
	return triFalse, nil
}

func (o havingOperand) value(row []any, mc *comparer) (any, valKind) {
	if o.col < 0 {
		return o.val, o.kind
	}
	k := kindOther
	if o.col < len(mc.kinds) {
		k = mc.kinds[o.col]
	}
	return row[o.col], k
}

// compareHaving compares two non-NULL values: numbers (integers, floats,
// numeric text, numeric literals) numerically, text in byte order (only
// equality when the shards do not collate in byte order), other values
// as the merge compares them.
func compareHaving(a any, ka valKind, b any, kb valKind, eqOnly bool, mc *comparer) (int, error) {
	// MySQL drivers return text as bytes.
	if x, ok := a.([]byte); ok && isText(ka) {
		a = string(x)
	}
	if y, ok := b.([]byte); ok && isText(kb) {
		b = string(y)
	}
	_, fa := a.(float64)
	_, fb := b.(float64)
	ra, na := numberOf(a, ka)
	rb, nb := numberOf(b, kb)
	// A string parameter compared with a number is read as a number (as
	// PostgreSQL reads an untyped parameter).
	if sa, ok := a.(string); ok && nb && !na && ka == kindOther {
		ra, na = numberOf(sa, kindNumeric)
	}
	if sb, ok := b.(string); ok && na && !nb && kb == kindOther {
		rb, nb = numberOf(sb, kindNumeric)
	}
	if na && nb {
		if fa || fb {
			x, _ := ra.Float64()
			y, _ := rb.Float64()
			if f, ok := a.(float64); ok {
				x = f
			}
			if f, ok := b.(float64); ok {
				y = f
			}
			return cmpFloat(x, y), nil
		}
		return ra.Cmp(rb), nil
	}
	if x, ok := a.(string); ok {
		if y, ok := b.(string); ok {
			if coll := mc.anyExprColl(); (isText(ka) || isText(kb)) && (!eqOnly && !coll.Order || !coll.Equal) {
				return 0, fmt.Errorf("comparing text across shards: %s", coll.Why)
			}
			if ka == kindPadded || kb == kindPadded {
				// A bpchar compared with a literal or another text:
				// PostgreSQL compares both without trailing spaces.
				x, y = trimPad(x), trimPad(y)
			}
			return strings.Compare(x, y), nil
		}
	}
	return (&comparer{coll: mc.anyExprColl()}).cmp(0, a, b)
}

// numberOf reads v as a number when it is one: an integer, a float, or
// decimal text of a numeric column or literal.
func numberOf(v any, k valKind) (*big.Rat, bool) {
	switch x := v.(type) {
	case int64:
		return new(big.Rat).SetInt64(x), true
	case float64:
		r := new(big.Rat)
		r.SetFloat64(x) // NaN or Inf: nil, compared as floats by the caller
		return r, true
	case string:
		if k == kindNumeric {
			r, ok := new(big.Rat).SetString(x)
			return r, ok
		}
	case []byte:
		if k == kindNumeric {
			r, ok := new(big.Rat).SetString(string(x))
			return r, ok
		}
	}
	return nil, false
}
