package merge

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// TextRanker is implemented by Shards that can sort text the way the
// shards do when that is not byte order (a PostgreSQL column of an ICU or
// libc locale collation). The merge of an ORDER BY over such a column
// then reads every shard's rows first, has the distinct values of the
// column sorted by one database (RankText), and merges by those ranks:
// the shards' own order, not the bytes'. Without it, or when RankText
// fails, the ORDER BY is refused as before (ErrUnsupported naming the
// column).
type TextRanker interface {
	// RankText returns the rank of every value of values (distinct) in the
	// order the shards sort column (a column of the read's table, unquoted)
	// by: equal ranks exactly for the values the shards call equal (a
	// dense rank).
	RankText(ctx context.Context, column string, values []string) (map[string]int, error)
}

// ranker is what rankKeys needs of a TextRanker, bound to a read's
// context.
type ranker func(column string, values []string) (map[string]int, error)

// keySource is the column of the read's table an ORDER BY key sorts by:
// an unqualified column name, sorted by itself or selected under the
// key's name ("" otherwise: an expression, a qualified name, which may
// name a joined table).
func (p *Plan) keySource(k orderKey) string {
	switch {
	case k.computed || k.qual != "":
		return ""
	case k.hidden > 0 || len(p.items) == 0:
		return k.name
	case k.col >= 0 && k.col < len(p.items):
		if it := p.items[k.col]; !strings.Contains(it.expr, ".") {
			return it.col
		}
	}
	return ""
}

// columnOf is the unqualified column e names, "" when e is not one.
func (p *Plan) columnOf(e string) string {
	if !p.plainExpr(e) || strings.Contains(e, ".") {
		return ""
	}
	return unquoteIdent(lastPart(normExpr(strings.TrimSpace(e))))
}

// rankable reports whether column c of cmp sorts by ranks when it can
// have them: text whose collation is not byte order, read from a column
// (not computed by an expression). exact: the collation must also call
// two values equal only when their bytes are (MIN/MAX and the order of
// merged groups pick among equal values); ordering rows needs not, since
// rows whose key values the shards call equal get one rank and go on to
// the next key.
func (m *comparer) rankable(c int, exact bool) bool {
	coll := m.collOf(c)
	return m.rank != nil && m.kind(c) == kindText && !coll.Order && (coll.Equal || !exact) && (c >= len(m.exprs) || m.exprs[c] == "")
}

// rankColumns ranks, for each column c of cols (its source column
// sources[c]), the text values rows hold there; a column the shards
// cannot rank is left to cmp, which refuses it.
func (m *comparer) rankColumns(cols []int, sources map[int]string, rows func(yield func([]any))) {
	for _, c := range cols {
		seen := map[string]bool{}
		var values []string
		rows(func(r []any) {
			if v, ok := textOf(r[c]); ok && !seen[v] {
				seen[v] = true
				values = append(values, v)
			}
		})
		ranks, err := m.rank(sources[c], values)
		if err != nil {
			continue
		}
		if m.ranks == nil {
			m.ranks = map[int]map[string]int{}
		}
		m.ranks[c] = ranks
	}
}

// rankBuffered reads every row of srcs into their buffers, then ranks the
// columns want (none: nothing is read ahead).
func (m *comparer) rankBuffered(srcs []*cursor, want []int, sources map[int]string) error {
	if len(want) == 0 {
		return nil
	}
	for _, s := range srcs {
		if err := s.bufferAll(); err != nil {
			return err
		}
	}
	m.rankColumns(want, sources, bufferedRows(srcs))
	return nil
}

// wantRank adds column c, sorted as source column src, to the columns to
// rank.
func wantRank(want []int, sources map[int]string, c int, src string) []int {
	if _, dup := sources[c]; !dup {
		want = append(want, c)
	}
	sources[c] = src
	return want
}

// bufferedRows yields the buffered rows of srcs.
func bufferedRows(srcs []*cursor) func(yield func([]any)) {
	return func(yield func([]any)) {
		for _, s := range srcs {
			for _, r := range s.buf {
				yield(r)
			}
		}
	}
}

// rankAggregates ranks the text MIN/MAX of an aggregate read compares
// across shards (the partial results), reading every row of srcs first.
func (p *Plan) rankAggregates(srcs []*cursor, cmp *comparer) error {
	if cmp.rank == nil {
		return nil
	}
	var want []int
	sources := map[int]string{}
	for i, it := range p.items {
		si := p.src[i]
		if (it.agg != "min" && it.agg != "max") || !cmp.rankable(si, true) {
			continue
		}
		if src := p.columnOf(it.arg); src != "" {
			want = wantRank(want, sources, si, src)
		}
	}
	return cmp.rankBuffered(srcs, want, sources)
}

// rankGroupOrder ranks the text of the ORDER BY keys of merged groups
// (mc indexes out's rows: the items, then the GROUP BY values): a key
// naming a plain GROUP BY column, or an item that is one or is its MIN or
// MAX.
func (p *Plan) rankGroupOrder(out [][]any, mc *comparer) {
	if mc.rank == nil {
		return
	}
	nv := len(p.items)
	var want []int
	sources := map[int]string{}
	for _, k := range p.order {
		c := k.col
		if c < 0 || k.computed || !mc.rankable(c, true) {
			continue
		}
		src := ""
		switch {
		case c < nv && (p.items[c].agg == "" || p.items[c].agg == "min" || p.items[c].agg == "max"):
			e := p.items[c].expr
			if p.items[c].agg != "" {
				e = p.items[c].arg
			}
			src = p.columnOf(e)
		case c >= nv && c-nv < len(p.groups):
			src = p.columnOf(p.groups[c-nv])
		}
		if src != "" {
			want = wantRank(want, sources, c, src)
		}
	}
	mc.rankColumns(want, sources, func(yield func([]any)) {
		for _, r := range out {
			yield(r)
		}
	})
}

// rankKeys gives cmp the ranks of the text of every ORDER BY key whose
// collation is not byte order but that the shards can rank (cmp.rank):
// it reads every row of srcs first (they stay in the cursors' buffers).
// A key it cannot rank is left to cmp, which refuses it.
func (p *Plan) rankKeys(keys []orderKey, srcs []*cursor, cmp *comparer) error {
	if cmp.rank == nil {
		return nil
	}
	var want []int
	sources := map[int]string{}
	for _, k := range keys {
		c := k.col
		if !cmp.rankable(c, false) {
			continue
		}
		src := p.keySource(k)
		if src != "" {
			want = wantRank(want, sources, c, src)
		}
	}
	return cmp.rankBuffered(srcs, want, sources)
}

// textOf returns a text value as a string.
func textOf(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	}
	return "", false
}

// bufferAll reads the cursor's remaining rows into its buffer.
func (c *cursor) bufferAll() error {
	if c.rows == nil {
		return nil
	}
	for {
		r, err := c.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		c.buf = append(c.buf, r)
	}
	c.rows = nil
	return nil
}

// cmpRanked compares two text values of column c by their ranks; ok is
// false when c has none.
func (m *comparer) cmpRanked(c int, a, b any) (int, bool, error) {
	r := m.ranks[c]
	if r == nil {
		return 0, false, nil
	}
	x, _ := textOf(a)
	y, _ := textOf(b)
	rx, okx := r[x]
	ry, oky := r[y]
	if !okx || !oky {
		return 0, true, fmt.Errorf("ordering text across shards: a value of column %d has no rank", c)
	}
	return cmpOrdered(int64(rx), int64(ry)), true, nil
}
