package sharding

import (
	"database/sql/driver"
	"reflect"
	"strconv"
	"strings"

	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/internal/lib/intkind"
)

// exprCond turns a GORM clause expression into a cond tree.
func exprCond(e clause.Expression, match columnMatcher) *cond {
	switch x := e.(type) {
	case clause.Where:
		return listCond(x.Exprs, true, match)
	case clause.AndConditions:
		return listCond(x.Exprs, true, match)
	case clause.OrConditions:
		return listCond(x.Exprs, false, match)
	case clause.Expr:
		return parseText(x.SQL, x.Vars, match)
	case *clause.Expr:
		if x == nil {
			return otherCond
		}
		return parseText(x.SQL, x.Vars, match)
	case clause.Eq:
		c := columnOf(x.Column, match)
		if c == 0 {
			return otherCond
		}
		vs, ok := intValues(x.Value)
		if !ok {
			return otherCond
		}
		return &cond{op: opLeaf, column: c, values: vs}
	case clause.IN:
		c := columnOf(x.Column, match)
		if c == 0 {
			return otherCond
		}
		leaf := &cond{op: opLeaf, column: c}
		for _, v := range x.Values {
			vs, ok := intValues(v)
			if !ok {
				return otherCond
			}
			leaf.values = append(leaf.values, vs...)
		}
		return leaf
	}
	return otherCond
}

// listCond evaluates a list the way clause.Where / buildExprs renders it:
// members joined by AND (or OR when and is false), except that a
// single-expression OrConditions is joined with OR; AND binds tighter.
func listCond(exprs []clause.Expression, and bool, match columnMatcher) *cond {
	if len(exprs) == 0 {
		return otherCond
	}
	if len(exprs) == 1 {
		if a, ok := exprs[0].(clause.AndConditions); ok {
			exprs = a.Exprs
		}
	}
	if !and {
		var out *cond
		for _, e := range exprs {
			c := exprCond(e, match)
			if out == nil {
				out = c
			} else {
				out = joinCond(opOr, out, c)
			}
		}
		return out
	}
	// GORM moves the first expression that is not a single OR to the front.
	exprs = append([]clause.Expression(nil), exprs...)
	for i, e := range exprs {
		if v, ok := e.(clause.OrConditions); !ok || len(v.Exprs) > 1 {
			exprs[0], exprs[i] = exprs[i], exprs[0]
			break
		}
	}
	var groups []*cond
	var cur *cond
	for i, e := range exprs {
		if v, ok := e.(clause.OrConditions); ok && len(v.Exprs) == 1 && i > 0 {
			groups = append(groups, cur)
			cur = exprCond(v.Exprs[0], match)
			continue
		}
		c := exprCond(e, match)
		if cur == nil {
			cur = c
		} else {
			cur = joinCond(opAnd, cur, c)
		}
	}
	groups = append(groups, cur)
	if len(groups) == 1 {
		return groups[0]
	}
	return &cond{op: opOr, kids: groups}
}

func columnOf(col any, match columnMatcher) int {
	switch c := col.(type) {
	case string:
		return match(strings.ToLower(c))
	case clause.Column:
		if c.Raw {
			return match(strings.ToLower(c.Name))
		}
		if c.Table != "" && c.Table != clause.CurrentTable {
			return match(strings.ToLower(c.Table) + "." + strings.ToLower(c.Name))
		}
		return match(strings.ToLower(c.Name))
	}
	return 0
}

// intValues converts a condition value to int64 shard keys: integers,
// strings of digits, pointers and driver.Valuers to those, and slices or
// arrays of them. ok is false for anything else (subqueries, expressions).
func intValues(v any) ([]int64, bool) {
	if n, ok := intValue(v); ok {
		return []int64{n}, true
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Slice || rv.Kind() == reflect.Array {
		if rv.Type().Elem().Kind() == reflect.Uint8 {
			return nil, false // []byte
		}
		out := make([]int64, 0, rv.Len())
		for i := 0; i < rv.Len(); i++ {
			n, ok := intValue(rv.Index(i).Interface())
			if !ok {
				return nil, false
			}
			out = append(out, n)
		}
		return out, true
	}
	return nil, false
}

func intValue(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	case uint:
		return int64(x), x <= 1<<63-1
	case uint64:
		return int64(x), x <= 1<<63-1
	case int32:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint8:
		return int64(x), true
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	case nil:
		return 0, false
	case driver.Valuer:
		dv, err := x.Value()
		if err != nil || dv == nil {
			return 0, false
		}
		if _, again := dv.(driver.Valuer); again {
			return 0, false
		}
		return intValue(dv)
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return 0, false
		}
		return intValue(rv.Elem().Interface())
	}
	return intkind.Of(v)
}
