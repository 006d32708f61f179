package merge

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/bits"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/sharding/internal/clauses"
)

// Deep pagination: ORDER BY <keys> LIMIT c OFFSET o over N shards without
// reading o+c rows from every shard (the "secondary query" method).
//
// The ORDER BY must be a total order (it names the primary key, unique
// across shards), every key up to the primary key a plain column of the
// table (it is compared in a WHERE). With q = o/N (rounded down):
//
//  1. each shard returns its rows at OFFSET q LIMIT c (R_i); k is the
//     smallest first row. Shard i has exactly q rows before its R_i, so at
//     most q rows before k.
//  2. each shard returns its rows from k on (NOT row < k), up to the last
//     row of R_i when R_i is full (c rows), every row when R_i is empty
//     (then the shard holds at most q rows). The rows before k on shard i
//     are q minus the extra rows (or counted, R_i empty); their sum G is
//     k's global position.
//  3. the answer is the merged rows from k on, skipping o-G, taking c. The
//     merge is exact for the rows up to the smallest last row of the full
//     shards; when fewer than o-G+c rows lie there (rows unevenly spread),
//     each full shard is asked for up to o-G+c more rows after its last.
//
// The shards are read in separate statements (no snapshot across them):
// a count that contradicts the first phase (rows written in between)
// falls back to the plain merge.

// planDeep marks a row-mode plan whose ORDER BY is a total order of table
// columns, the condition of the two-phase method.
func (p *Plan) planDeep(stmt *gorm.Statement) {
	if p.agg || p.distinct || p.limit <= 0 || len(p.order) == 0 || stmt.Schema == nil || stmt.Schema.PrioritizedPrimaryField == nil {
		return
	}
	pk := stmt.Schema.PrioritizedPrimaryField.DBName
	for _, k := range p.order {
		if k.qual != "" && !sameTable(k.qual, stmt.Table) {
			return
		}
		if f := stmt.Schema.LookUpField(k.name); f == nil || f.DBName != k.name {
			return
		}
		for _, it := range p.items { // an alias hiding the column
			if it.outName() == k.name && it.col != k.name {
				return
			}
		}
		if k.name == pk {
			p.deepOK = true
			return
		}
	}
}

// deepRead runs the two-phase method (see above).
func deepRead(db *gorm.DB, tg *read, p *Plan) (int64, error) {
	ctx := db.Statement.Context
	if ctx == nil {
		ctx = context.Background()
	}
	fallback := func() (int64, error) {
		cp := *p
		cp.deepOK = false
		return mergeRead(db, tg, &cp)
	}
	n := bits.OnesCount64(tg.mask)
	q, c := p.offset/n, p.limit
	pos := map[int]int{}
	for m, i := tg.mask, 0; m != 0; m, i = m&(m-1), i+1 {
		pos[bits.TrailingZeros64(m)] = i
	}

	// Phase 1.
	r1, cols, cts, err := readAll(db, tg, p, func(_ int, st *gorm.Statement) { setLimit(st, c, q) })
	if err != nil {
		return 0, err
	}
	cmp := &comparer{}
	for _, ct := range cts {
		cmp.types = append(cmp.types, ct.DatabaseTypeName())
		cmp.kinds = append(cmp.kinds, kindOf(ct.DatabaseTypeName()))
	}
	cmp.coll = tg.sh.TextCollation(ctx)
	cmp.exprs = p.shardExprs(len(cols))
	visible := len(cols) - p.nHidden
	keys, err := p.resolveKeys(cols, visible)
	if err != nil {
		return 0, fmt.Errorf("%w: %s on %q: %v", ErrUnsupported, tg.op, tg.table, err)
	}
	var k []any
	for _, rs := range r1 {
		if len(rs) == 0 {
			continue
		}
		if k == nil {
			k = rs[0]
		} else if o, err := compareRows(keys, cmp, rs[0], k); err != nil {
			return 0, err
		} else if o < 0 {
			k = rs[0]
		}
	}
	res := &mergeResult{}
	res.setColumns(cols, cts, visible)
	if k == nil { // every shard holds at most q rows: at most o in all
		return deliver(db, tg, p, res)
	}
	before := keyPred(keys, k, -1)

	// Phase 2.
	r2, _, _, err := readAll(db, tg, p, func(si int, st *gorm.Statement) {
		delete(st.Clauses, "LIMIT")
		if rs := r1[pos[si]]; len(rs) > 0 {
			conds := []clause.Expression{notPred(dialectExpr(st, before))}
			if len(rs) == c {
				conds = append(conds, notPred(dialectExpr(st, keyPred(keys, rs[len(rs)-1], +1))))
			}
			clauses.AndWhere(st, conds...)
		}
	})
	if err != nil {
		return 0, err
	}
	g := 0
	var full []int // shards that may hold more rows than fetched
	for i, rs := range r2 {
		cnt := 0
		if len(r1[i]) == 0 { // all the shard's rows: drop those before k
			for cnt < len(rs) {
				o, err := compareRows(keys, cmp, rs[cnt], k)
				if err != nil {
					return 0, err
				}
				if o >= 0 {
					break
				}
				cnt++
			}
			r2[i] = rs[cnt:]
		} else {
			cnt = q - (len(rs) - len(r1[i]))
			if len(r1[i]) == c {
				full = append(full, i)
			}
		}
		if cnt < 0 || cnt > q {
			return fallback() // rows changed between the phases
		}
		g += cnt
	}
	if g > p.offset {
		return fallback()
	}
	skip := p.offset - g
	need := skip + c

	// Phase 3 when the fetched rows may not cover the page.
	if len(full) > 0 {
		bound := r2[full[0]][len(r2[full[0]])-1]
		for _, i := range full[1:] {
			last := r2[i][len(r2[i])-1]
			if o, err := compareRows(keys, cmp, last, bound); err != nil {
				return 0, err
			} else if o < 0 {
				bound = last
			}
		}
		covered := 0
		for _, rs := range r2 {
			for _, r := range rs {
				if o, err := compareRows(keys, cmp, r, bound); err != nil {
					return 0, err
				} else if o <= 0 {
					covered++
				}
			}
		}
		if covered < need {
			isFull := map[int]bool{}
			for _, i := range full {
				isFull[i] = true
			}
			mask := uint64(0)
			for si, i := range pos {
				if isFull[i] {
					mask |= 1 << si
				}
			}
			t3 := *tg
			t3.mask = mask
			r3, _, _, err := readAll(db, &t3, p, func(si int, st *gorm.Statement) {
				rs := r2[pos[si]]
				setLimit(st, need, 0)
				clauses.AndWhere(st, dialectExpr(st, keyPred(keys, rs[len(rs)-1], +1)))
			})
			if err != nil {
				return 0, err
			}
			j := 0
			for m := mask; m != 0; m &= m - 1 {
				i := pos[bits.TrailingZeros64(m)]
				r2[i] = append(r2[i], r3[j]...)
				j++
			}
		}
	}

	// The merged page.
	srcs := make([]*cursor, len(r2))
	names := partNames(tg)
	for i, rs := range r2 {
		srcs[i] = &cursor{buf: rs, shard: names[i], n: len(cols)}
	}
	cp := *p
	cp.offset = skip
	merged, err := cp.mergeRows(srcs, cols, cmp)
	if err != nil {
		return 0, fmt.Errorf("%w: %s on %q over %d shards: %v", ErrUnsupported, tg.op, tg.table, n, err)
	}
	for i, r := range merged {
		merged[i] = r[:len(res.cols)]
	}
	res.rows = merged
	return deliver(db, tg, p, res)
}

// partNames returns the names of the shards of tg.mask, in mask order.
func partNames(tg *read) []string {
	var out []string
	for m := tg.mask; m != 0; m &= m - 1 {
		out = append(out, tg.sh.Name(bits.TrailingZeros64(m)))
	}
	return out
}

// readAll runs the statement on the shards of tg.mask and reads every
// row, per shard in mask order.
func readAll(db *gorm.DB, tg *read, p *Plan, extra func(si int, st *gorm.Statement)) ([][][]any, []string, []*sql.ColumnType, error) {
	parts, err := fanOut(db, tg, p, extra)
	if err != nil {
		return nil, nil, nil, err
	}
	defer closeParts(parts)
	cols, err := parts[0].rows.Columns()
	if err != nil {
		return nil, nil, nil, err
	}
	cts, _ := parts[0].rows.ColumnTypes()
	out := make([][][]any, len(parts))
	for i, pt := range parts {
		cu := &cursor{rows: pt.rows, shard: tg.sh.Name(pt.si), n: len(cols)}
		if c, err := pt.rows.Columns(); err != nil || len(c) != len(cols) {
			return nil, nil, nil, fmt.Errorf("%w: shards returned different columns", ErrUnsupported)
		}
		for {
			r, err := cu.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, nil, nil, err
			}
			out[i] = append(out[i], r)
		}
		if tg.rowsRead != nil {
			tg.rowsRead(cu.shard, cu.read)
		}
	}
	return out, cols, cts, nil
}

func setLimit(st *gorm.Statement, limit, offset int) {
	st.Clauses["LIMIT"] = clause.Clause{Expression: clause.Limit{Limit: &limit, Offset: offset}}
}

func notPred(e clause.Expr) clause.Expression {
	return clause.Expr{SQL: "NOT ?", Vars: []any{e}}
}

// keyPred is the condition "the row comes strictly before (dir -1) or
// after (dir +1) the row v in the ORDER BY", NULLs placed as the ORDER BY
// places them; never NULL itself (COALESCE), so that NOT negates it.
func keyPred(keys []orderKey, v []any, dir int) clause.Expr {
	var ors []string
	var vars []any
	var eqs []string
	var eqVars []any
	for _, k := range keys {
		val := v[k.col]
		// strictly before/after val on this key
		var strict string
		var sv []any
		less := k.desc == (dir > 0) // the column compares "<" val
		nullsBefore := k.nullsFirst == (dir < 0)
		switch {
		case val == nil && nullsBefore:
			strict = "FALSE"
		case val == nil:
			strict = k.expr + " IS NOT NULL"
		default:
			op := ">"
			if less {
				op = "<"
			}
			strict = k.expr + " " + op + " ?"
			sv = []any{val}
			if nullsBefore {
				strict = "(" + strict + " OR " + k.expr + " IS NULL)"
			}
		}
		term := strict
		if len(eqs) > 0 {
			term = strings.Join(eqs, " AND ") + " AND " + strict
		}
		ors = append(ors, "("+term+")")
		vars = append(vars, eqVars...)
		vars = append(vars, sv...)
		if val == nil {
			eqs = append(eqs, k.expr+" IS NULL")
		} else {
			eqs = append(eqs, k.expr+" = ?")
			eqVars = append(eqVars, val)
		}
	}
	return clause.Expr{SQL: "COALESCE((" + strings.Join(ors, " OR ") + "), FALSE)", Vars: vars}
}
