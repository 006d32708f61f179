package sharding

import (
	"reflect"
	"strconv"
	"strings"

	"github.com/freshread/freshread/sharding/internal/sqltext"
)

// Raw SQL IN lists split per shard, like the GORM path's (planSplit): a
// top-level AND member "key IN (...)", "key = ANY($n)" or
// "key = ANY(ARRAY[...])" of a statement that reaches several shards is
// rewritten for each shard with only that shard's values, so each shard
// reads (or writes) only the rows it owns.

// rawPart is the text and variables of a raw statement for one shard.
type rawPart struct {
	sql  string
	vars []any
}

// planRawSplit finds a splittable list among the top-level AND members of
// the raw statement's WHERE condition c and sets tg.rawParts.
func (s *Sharding) planRawSplit(tg *target, c *cond, sqlText string, vars []any, shardOfID map[int64]int) {
	members := []*cond{c}
	if c.op == opAnd {
		members = c.kids
	}
	toks := sqltext.Lex(sqlText)
	uses := map[int]int{} // variable index -> how often the text names it
	for _, t := range toks {
		if t.Kind == sqltext.Param {
			if t.Param < 0 {
				return // "?" placeholders: positions would shift
			}
			uses[t.Param]++
		}
	}
	for _, m := range members {
		if m.op != opLeaf || m.src == nil || len(m.values) < 2 {
			continue
		}
		shardOf := func(v int64) (int, bool) {
			if m.column == colKey {
				return tg.pl.key(v), true
			}
			si, ok := shardOfID[v]
			return si, ok
		}
		var parts map[int]rawPart
		if m.src.param >= 0 {
			parts = splitArrayVar(m.src.param, sqlText, vars, uses, shardOf)
		} else {
			parts = splitList(m.src.elems, sqlText, toks, vars, uses, shardOf)
		}
		if parts != nil {
			tg.rawParts, tg.reason = parts, "split"
			return
		}
	}
}

// splitArrayVar splits the array variable of "= ANY($n)": the text stays,
// each shard gets the elements it owns.
func splitArrayVar(idx int, sqlText string, vars []any, uses map[int]int, shardOf func(int64) (int, bool)) map[int]rawPart {
	if idx >= len(vars) || uses[idx] != 1 {
		return nil
	}
	rv := reflect.ValueOf(vars[idx])
	if rv.Kind() != reflect.Slice {
		return nil
	}
	subs := map[int]reflect.Value{}
	for i := 0; i < rv.Len(); i++ {
		n, ok := intValue(rv.Index(i).Interface())
		if !ok {
			return nil
		}
		si, ok := shardOf(n)
		if !ok {
			return nil
		}
		sub, seen := subs[si]
		if !seen {
			sub = reflect.MakeSlice(rv.Type(), 0, rv.Len())
		}
		subs[si] = reflect.Append(sub, rv.Index(i))
	}
	out := make(map[int]rawPart, len(subs))
	for si, sub := range subs {
		vs := append([]any(nil), vars...)
		vs[idx] = sub.Interface()
		out[si] = rawPart{sql: sqlText, vars: vs}
	}
	return out
}

// splitList rewrites a list of literals and $n parameters: each shard's
// text keeps its own elements, and the parameters of the others are
// dropped (the rest renumbered, so that no $n is left unreferenced).
func splitList(elems []listElem, sqlText string, toks []sqltext.Tok, vars []any, uses map[int]int, shardOf func(int64) (int, bool)) map[int]rawPart {
	if len(elems) == 0 {
		return nil
	}
	byShard := map[int][]listElem{}
	for _, e := range elems {
		if e.param >= 0 && (uses[e.param] != 1 || e.param >= len(vars)) {
			return nil
		}
		si, ok := shardOf(e.value)
		if !ok {
			return nil
		}
		byShard[si] = append(byShard[si], e)
	}
	from, to := elems[0].pos, elems[len(elems)-1].end
	out := make(map[int]rawPart, len(byShard))
	for si, keep := range byShard {
		dropped := map[int]bool{}
		for _, e := range elems {
			if e.param >= 0 {
				dropped[e.param] = true
			}
		}
		for _, e := range keep {
			delete(dropped, e.param)
		}
		// New number of each kept variable; the variables in the new order.
		renum := make([]int, len(vars))
		var vs []any
		for i, v := range vars {
			if dropped[i] {
				renum[i] = -1
				continue
			}
			renum[i] = len(vs)
			vs = append(vs, v)
		}
		param := func(i int) string { return "$" + strconv.Itoa(renum[i]+1) }
		var b strings.Builder
		last, written := 0, false
		for _, t := range toks {
			if t.Pos >= from && t.End <= to {
				continue // the list's own tokens: written once, below
			}
			if !written && t.Pos >= to {
				b.WriteString(sqlText[last:from])
				for j, e := range keep {
					if j > 0 {
						b.WriteString(", ")
					}
					if e.param >= 0 {
						b.WriteString(param(e.param))
					} else {
						b.WriteString(sqlText[e.pos:e.end])
					}
				}
				last, written = to, true
			}
			if t.Kind == sqltext.Param {
				b.WriteString(sqlText[last:t.Pos])
				b.WriteString(param(t.Param))
				last = t.End
			}
		}
		if !written {
			return nil // nothing after the list: not a statement we read
		}
		b.WriteString(sqlText[last:])
		out[si] = rawPart{sql: b.String(), vars: vs}
	}
	return out
}
