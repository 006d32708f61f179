package merge

import (
	"container/heap"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"reflect"
	"sort"
	"strings"
	"sync"

	"gorm.io/gorm"
)

// mergeRead runs a multi-shard read on every shard of tg.mask, merges the
// rows as p says (p == nil: concatenation, for raw SQL) and hands the
// result to GORM: scanned into the destination (Find, First, Count,
// Pluck...) or as *sql.Rows / *sql.Row (Rows, Row, Scan).
func mergeRead(db *gorm.DB, tg *read, p *Plan) (int64, error) {
	stmt := db.Statement
	ctx := stmt.Context
	if ctx == nil {
		ctx = context.Background()
	}
	if p != nil && p.deepOK && bits.OnesCount64(tg.mask) > 1 && p.offset >= tg.deepOffset && p.offset >= 4*p.limit {
		return deepRead(db, tg, p)
	}
	parts, err := fanOut(db, tg, p, nil)
	if err != nil {
		return 0, err
	}
	defer closeParts(parts)

	// The shards' columns (the same statement: the same columns).
	cols, err := parts[0].rows.Columns()
	if err != nil {
		return 0, err
	}
	cts, _ := parts[0].rows.ColumnTypes()
	srcs := make([]*cursor, len(parts))
	for i, pt := range parts {
		c, err := pt.rows.Columns()
		if err != nil {
			return 0, err
		}
		if len(c) != len(cols) {
			return 0, fmt.Errorf("%w: shards returned %d and %d columns", ErrUnsupported, len(cols), len(c))
		}
		srcs[i] = &cursor{rows: pt.rows, shard: tg.sh.Name(pt.si), n: len(cols)}
	}
	cmp := &comparer{}
	for _, ct := range cts {
		cmp.types = append(cmp.types, ct.DatabaseTypeName())
		cmp.kinds = append(cmp.kinds, kindOf(ct.DatabaseTypeName()))
	}
	if p != nil && (len(p.order) > 0 || p.agg || p.distinct) {
		cmp.coll = tg.sh.TextCollation(ctx)
		cmp.exprs = p.shardExprs(len(cols))
		if tr, ok := tg.sh.(TextRanker); ok {
			cmp.rank = func(column string, values []string) (map[string]int, error) {
				return tr.RankText(ctx, column, values)
			}
		}
	}

	res := &mergeResult{}
	var merged [][]any
	switch {
	case p == nil:
		merged, err = concatRows(srcs, -1, 0, false)
		res.setColumns(cols, cts, len(cols))
	case p.agg:
		merged, err = p.aggregate(srcs, cols, cts, cmp, res)
	default:
		merged, err = p.mergeRows(srcs, cols, cmp)
		res.setColumns(cols, cts, len(cols)-p.nHidden)
	}
	if err != nil {
		if errors.Is(err, ErrUnsupported) {
			return 0, err
		}
		return 0, fmt.Errorf("%w: %s on %q over %d shards: %v", ErrUnsupported, tg.op, tg.table, len(parts), err)
	}
	if tg.rowsRead != nil {
		for _, c := range srcs {
			tg.rowsRead(c.shard, c.read)
		}
	}
	for i, r := range merged {
		merged[i] = r[:len(res.cols)]
	}
	res.rows = merged
	return deliver(db, tg, p, res)
}

// shardPart is one shard's execution of a merged read.
type shardPart struct {
	si   int
	sub  *gorm.DB
	rows *sql.Rows
}

func closeParts(parts []*shardPart) {
	for _, pt := range parts {
		if pt.rows != nil {
			pt.rows.Close()
			pt.rows = nil
		}
	}
}

// fanOut runs the statement on every shard of tg.mask concurrently, as p
// rewrites it and then extra (per shard, may be nil) changes it.
func fanOut(db *gorm.DB, tg *read, p *Plan, extra func(si int, st *gorm.Statement)) ([]*shardPart, error) {
	var parts []*shardPart
	for m := tg.mask; m != 0; m &= m - 1 {
		si := bits.TrailingZeros64(m)
		sub := db.Session(&gorm.Session{Initialized: true}) // cloned here, not in the goroutines
		sub.Statement.Settings.Store("rows", true)
		parts = append(parts, &shardPart{si: si, sub: sub})
	}
	change := func(si int, st *gorm.Statement) {
		if p != nil {
			p.rewrite(st)
		}
		if extra != nil {
			extra(si, st)
		}
	}
	var wg sync.WaitGroup
	for _, pt := range parts {
		wg.Add(1)
		go func(pt *shardPart) {
			defer wg.Done()
			tg.sh.Exec(pt.si, pt.sub, change)
			sub := pt.sub
			if sub.Error == nil {
				pt.rows, _ = sub.Statement.Dest.(*sql.Rows)
				if pt.rows == nil {
					sub.Error = fmt.Errorf("no rows from the shard (DryRun?)")
				}
			}
		}(pt)
	}
	wg.Wait()
	var errs []error
	for _, pt := range parts {
		if pt.sub.Error != nil {
			errs = append(errs, fmt.Errorf("sharding: shard %q: %w", tg.sh.Name(pt.si), pt.sub.Error))
		}
	}
	if len(errs) > 0 {
		closeParts(parts)
		return nil, errors.Join(errs...)
	}
	return parts, nil
}

// deliver scans the merged result into the statement's destination, or
// leaves *sql.Rows / *sql.Row in it for Row/Rows/Scan.
func deliver(db *gorm.DB, tg *read, p *Plan, res *mergeResult) (int64, error) {
	stmt := db.Statement
	ctx := stmt.Context
	if ctx == nil {
		ctx = context.Background()
	}
	mdb := mergeDB()
	if tg.row {
		if v, ok := stmt.Settings.Load("rows"); ok && v.(bool) {
			rows, err := mdb.QueryContext(ctx, mergeQuery, res)
			stmt.Dest = rows
			return -1, err
		}
		stmt.Dest = mdb.QueryRowContext(ctx, mergeQuery, res)
		return -1, nil
	}
	rows, err := mdb.QueryContext(ctx, mergeQuery, res)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	sc := db.Session(&gorm.Session{Initialized: true})
	sc.Statement.Dest = stmt.Dest
	sc.Statement.ReflectValue = stmt.ReflectValue
	gorm.Scan(rows, sc, 0)
	if sc.Error == nil && p != nil && p.afterFnd && sc.RowsAffected > 0 {
		callAfterFind(sc, stmt.ReflectValue)
	}
	return sc.RowsAffected, sc.Error
}

// cursor reads one shard's rows.
type cursor struct {
	rows  *sql.Rows
	shard string
	n     int
	prev  []any   // the previous row (order check)
	buf   [][]any // rows already read (rows == nil)
	read  int     // rows read from rows
}

func (c *cursor) next() ([]any, error) {
	if c.rows == nil {
		if len(c.buf) == 0 {
			return nil, io.EOF
		}
		r := c.buf[0]
		c.buf = c.buf[1:]
		return r, nil
	}
	if !c.rows.Next() {
		if err := c.rows.Err(); err != nil {
			return nil, fmt.Errorf("shard %q: %w", c.shard, err)
		}
		return nil, io.EOF
	}
	vals := make([]any, c.n)
	ptrs := make([]any, c.n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := c.rows.Scan(ptrs...); err != nil {
		return nil, fmt.Errorf("shard %q: %w", c.shard, err)
	}
	c.read++
	return vals, nil
}

// window applies OFFSET, LIMIT and DISTINCT to a stream of rows.
type window struct {
	limit, offset int
	distinct      bool
	visible       int
	seen          map[string]bool
	skipped       int
	out           [][]any
}

// add takes a row; done says no more rows are needed.
func (w *window) add(r []any, kinds []valKind) (done bool) {
	if w.distinct {
		if w.seen == nil {
			w.seen = map[string]bool{}
		}
		var b strings.Builder
		for i := 0; i < w.visible; i++ {
			k := kindOther
			if i < len(kinds) {
				k = kinds[i]
			}
			groupKey(&b, r[i], k)
		}
		if w.seen[b.String()] {
			return false
		}
		w.seen[b.String()] = true
	}
	if w.skipped < w.offset {
		w.skipped++
		return false
	}
	if w.limit >= 0 && len(w.out) >= w.limit {
		return true
	}
	w.out = append(w.out, r)
	return w.limit >= 0 && len(w.out) >= w.limit
}

func concatRows(srcs []*cursor, limit, offset int, distinct bool) ([][]any, error) {
	w := &window{limit: limit, offset: offset, distinct: distinct}
	if limit == 0 {
		return nil, nil
	}
	for _, c := range srcs {
		w.visible = c.n
		for {
			r, err := c.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, err
			}
			if w.add(r, nil) {
				return w.out, nil
			}
		}
	}
	return w.out, nil
}

// mergeRows merges row-mode results: a k-way heap merge in ORDER BY order
// (ties by shard order), or a concatenation; then OFFSET/LIMIT/DISTINCT.
func (p *Plan) mergeRows(srcs []*cursor, cols []string, cmp *comparer) ([][]any, error) {
	visible := len(cols) - p.nHidden
	w := &window{limit: p.limit, offset: p.offset, distinct: p.distinct, visible: visible}
	if p.limit == 0 {
		return nil, nil
	}
	if p.distinct {
		all := make([]int, visible)
		for i := range all {
			all[i] = i
		}
		if err := cmp.equalText("DISTINCT", all); err != nil {
			return nil, err
		}
	}
	if len(p.order) == 0 {
		for _, c := range srcs {
			for {
				r, err := c.next()
				if err == io.EOF {
					break
				}
				if err != nil {
					return nil, err
				}
				if w.add(r, cmp.kinds) {
					return w.out, nil
				}
			}
		}
		return w.out, nil
	}
	keys, err := p.resolveKeys(cols, visible)
	if err != nil {
		return nil, err
	}
	if err := p.rankKeys(keys, srcs, cmp); err != nil {
		return nil, err
	}
	h := &rowHeap{keys: keys, cmp: cmp}
	for i, c := range srcs {
		r, err := c.next()
		if err == io.EOF {
			continue
		}
		if err != nil {
			return nil, err
		}
		c.prev = r
		h.items = append(h.items, heapItem{row: r, src: i})
	}
	heap.Init(h)
	for h.Len() > 0 && h.err == nil {
		top := h.items[0]
		if w.add(top.row, cmp.kinds) {
			break
		}
		c := srcs[top.src]
		r, err := c.next()
		switch {
		case err == io.EOF:
			heap.Pop(h)
			continue
		case err != nil:
			return nil, err
		}
		// Each shard must deliver its rows in the merge's order; if not
		// (a collation the merge does not know), refuse.
		if o, err := compareRows(keys, cmp, c.prev, r); err != nil {
			return nil, err
		} else if o > 0 {
			return nil, fmt.Errorf("shard %q returned rows out of the merge order (a text collation other than byte order?)", c.shard)
		}
		c.prev = r
		h.items[0].row = r
		heap.Fix(h, 0)
	}
	if h.err != nil {
		return nil, h.err
	}
	return w.out, nil
}

// resolveKeys places the ORDER BY keys found by name in the columns.
func (p *Plan) resolveKeys(cols []string, visible int) ([]orderKey, error) {
	keys := make([]orderKey, len(p.order))
	copy(keys, p.order)
	for i := range keys {
		if keys[i].col >= 0 {
			continue
		}
		if keys[i].hidden > 0 { // after the statement's own columns
			keys[i].col = visible + keys[i].hidden - 1
			continue
		}
		found := -1
		for j := 0; j < visible; j++ {
			if cols[j] == keys[i].name {
				if found >= 0 {
					return nil, fmt.Errorf("ORDER BY %s names several result columns", keys[i].expr)
				}
				found = j
			}
		}
		if found < 0 {
			return nil, fmt.Errorf("ORDER BY %s is not a column of the result", keys[i].expr)
		}
		keys[i].col = found
	}
	return keys, nil
}

// compareRows compares two rows by the ORDER BY keys (NULLs last for ASC,
// first for DESC, unless NULLS FIRST/LAST says otherwise).
func compareRows(keys []orderKey, cmp *comparer, a, b []any) (int, error) {
	for _, k := range keys {
		va, vb := a[k.col], b[k.col]
		var c int
		switch {
		case va == nil && vb == nil:
		case va == nil:
			c = 1
			if k.nullsFirst {
				c = -1
			}
		case vb == nil:
			c = -1
			if k.nullsFirst {
				c = 1
			}
		default:
			var err error
			if c, err = cmp.cmp(k.col, va, vb); err != nil {
				return 0, err
			}
			if k.desc {
				c = -c
			}
		}
		if c != 0 {
			return c, nil
		}
	}
	return 0, nil
}

type heapItem struct {
	row []any
	src int
}

type rowHeap struct {
	items []heapItem
	keys  []orderKey
	cmp   *comparer
	err   error
}

func (h *rowHeap) Len() int { return len(h.items) }
func (h *rowHeap) Less(i, j int) bool {
	c, err := compareRows(h.keys, h.cmp, h.items[i].row, h.items[j].row)
	if err != nil && h.err == nil {
		h.err = err
	}
	if c != 0 {
		return c < 0
	}
	return h.items[i].src < h.items[j].src
}
func (h *rowHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *rowHeap) Push(x any)    { h.items = append(h.items, x.(heapItem)) }
func (h *rowHeap) Pop() any {
	n := len(h.items)
	it := h.items[n-1]
	h.items = h.items[:n-1]
	return it
}

// aggregate combines per-shard partial aggregates by group, sorts the
// groups by ORDER BY and applies OFFSET/LIMIT. Merged rows are the visible
// items followed by the group values (for ORDER BY on them).
func (p *Plan) aggregate(srcs []*cursor, cols []string, cts []*sql.ColumnType, cmp *comparer, res *mergeResult) ([][]any, error) {
	nv := len(p.items)
	type group struct {
		vals []any
		sets []map[string]struct{} // count(DISTINCT): the union of the shards' values
	}
	if err := cmp.equalText("GROUP BY", p.groupCol); err != nil {
		return nil, err
	}
	if err := p.rankAggregates(srcs, cmp); err != nil {
		return nil, err
	}
	groups := map[string]*group{}
	var order []*group
	for _, c := range srcs {
		for {
			r, err := c.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, err
			}
			var b strings.Builder
			for _, gc := range p.groupCol {
				groupKey(&b, r[gc], cmp.kinds[gc])
			}
			g := groups[b.String()]
			if g == nil {
				g = &group{vals: make([]any, nv+2*nv+len(p.groups)), sets: make([]map[string]struct{}, nv)}
				groups[b.String()] = g
				order = append(order, g)
				for i, it := range p.items {
					si := p.src[i]
					g.vals[i] = r[si]
					if it.agg == "avg" {
						g.vals[nv+2*i], g.vals[nv+2*i+1] = r[si], r[si+1]
					}
					if it.agg == "countd" {
						g.sets[i] = map[string]struct{}{}
						if err := addDistinct(g.sets[i], r[si], cmp.coll); err != nil {
							return nil, err
						}
					}
				}
				for j, gc := range p.groupCol {
					g.vals[3*nv+j] = r[gc]
				}
				continue
			}
			for i, it := range p.items {
				si := p.src[i]
				v := r[si]
				switch it.agg {
				case "count", "sum":
					if g.vals[i], err = addValues(g.vals[i], v); err != nil {
						return nil, err
					}
				case "min", "max":
					if v == nil {
						continue
					}
					if g.vals[i] == nil {
						g.vals[i] = v
						continue
					}
					o, err := cmp.cmp(si, v, g.vals[i])
					if err != nil {
						return nil, err
					}
					if it.agg == "min" && o < 0 || it.agg == "max" && o > 0 {
						g.vals[i] = v
					}
				case "countd":
					if err := addDistinct(g.sets[i], v, cmp.coll); err != nil {
						return nil, err
					}
				case "avg":
					if g.vals[nv+2*i], err = addValues(g.vals[nv+2*i], v); err != nil {
						return nil, err
					}
					if g.vals[nv+2*i+1], err = addValues(g.vals[nv+2*i+1], r[si+1]); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	// The output columns.
	for i, it := range p.items {
		si := p.src[i]
		col := resultCol{name: cols[si]}
		if si < len(cts) {
			col.fill(cts[si])
		}
		if it.agg == "avg" {
			col.name = it.alias
			if col.name == "" {
				col.name = "avg"
			}
			if col.dbType != "FLOAT8" && col.dbType != "FLOAT4" {
				col.dbType = "NUMERIC"
			}
			col.scan = reflect.TypeFor[float64]()
		}
		if it.agg == "count" || it.agg == "countd" {
			col.dbType, col.scan = "INT8", reflect.TypeFor[int64]()
			col.nullable, col.nullOK = false, true
		}
		if it.agg == "countd" {
			col.name = it.alias
			if col.name == "" {
				col.name = "count"
			}
		}
		res.cols = append(res.cols, col)
	}
	out := make([][]any, 0, len(order))
	for _, g := range order {
		row := make([]any, nv+len(p.groups))
		copy(row, g.vals[:nv])
		for i, it := range p.items {
			if it.agg == "avg" {
				v, err := avgValue(g.vals[nv+2*i], g.vals[nv+2*i+1])
				if err != nil {
					return nil, err
				}
				row[i] = v
			}
			if it.agg == "countd" {
				row[i] = int64(len(g.sets[i]))
			}
		}
		copy(row[nv:], g.vals[3*nv:])
		out = append(out, row)
	}
	// The kinds of the merged columns (keys and HAVING index merged rows).
	mc := &comparer{coll: cmp.coll, exprs: p.mergedExprs(cmp.exprs), rank: cmp.rank}
	for i, it := range p.items {
		k := cmp.kinds[p.src[i]]
		switch it.agg {
		case "avg":
			k = kindNumeric
		case "countd":
			k = kindOther
		}
		mc.kinds = append(mc.kinds, k)
		mc.types = append(mc.types, res.cols[i].dbType)
	}
	for _, gc := range p.groupCol {
		mc.kinds = append(mc.kinds, cmp.kinds[gc])
		mc.types = append(mc.types, cmp.types[gc])
	}
	res.cols = res.cols[:p.nVis] // hidden HAVING aggregates are not output
	if p.having != nil {
		kept := out[:0]
		for _, r := range out {
			v, err := p.having.eval(r, mc)
			if err != nil {
				return nil, err
			}
			if v == triTrue {
				kept = append(kept, r)
			}
		}
		out = kept
	}
	// Sort the merged groups.
	if len(p.order) > 0 {
		p.rankGroupOrder(out, mc)
		var serr error
		sort.SliceStable(out, func(i, j int) bool {
			c, err := compareRows(p.order, mc, out[i], out[j])
			if err != nil && serr == nil {
				serr = err
			}
			return c < 0
		})
		if serr != nil {
			return nil, serr
		}
	}
	w := &window{limit: p.limit, offset: p.offset}
	if p.limit == 0 {
		return nil, nil
	}
	for _, r := range out {
		if w.add(r, nil) {
			break
		}
	}
	return w.out, nil
}

// callAfterFind calls the AfterFind hooks of the scanned models.
func callAfterFind(db *gorm.DB, rv reflect.Value) {
	type afterFind interface{ AfterFind(*gorm.DB) error }
	call := func(v reflect.Value) {
		if v.Kind() != reflect.Pointer && v.CanAddr() {
			v = v.Addr()
		}
		if i, ok := v.Interface().(afterFind); ok {
			db.AddError(i.AfterFind(db))
		}
	}
	rv = reflect.Indirect(rv)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		for i := 0; i < rv.Len(); i++ {
			call(rv.Index(i))
		}
	case reflect.Struct:
		call(rv)
	}
}

// --- the merged result as a database/sql result set ---------------------
//
// The merged rows are served by a small in-process database/sql driver so
// that GORM scans them exactly as it scans a shard's rows (the same
// conversions into structs, maps, scalars and Scanners), and Rows/Row/Scan
// get real *sql.Rows / *sql.Row.

const mergeQuery = "freshread sharding merge"

type resultCol struct {
	name     string
	dbType   string
	scan     reflect.Type
	nullable bool
	nullOK   bool
}

func (c *resultCol) fill(ct *sql.ColumnType) {
	c.dbType = ct.DatabaseTypeName()
	c.scan = ct.ScanType()
	c.nullable, c.nullOK = ct.Nullable()
}

type mergeResult struct {
	cols []resultCol
	rows [][]any
}

func (r *mergeResult) setColumns(cols []string, cts []*sql.ColumnType, n int) {
	for i := 0; i < n; i++ {
		c := resultCol{name: cols[i]}
		if i < len(cts) {
			c.fill(cts[i])
		}
		r.cols = append(r.cols, c)
	}
}

var (
	mergeOnce sync.Once
	mergeSQL  *sql.DB
)

func mergeDB() *sql.DB {
	mergeOnce.Do(func() {
		mergeSQL = sql.OpenDB(mergeConnector{})
		mergeSQL.SetMaxIdleConns(64)
	})
	return mergeSQL
}

type mergeConnector struct{}

func (mergeConnector) Connect(context.Context) (driver.Conn, error) { return mergeConn{}, nil }
func (mergeConnector) Driver() driver.Driver                        { return mergeDriver{} }

type mergeDriver struct{}

func (mergeDriver) Open(string) (driver.Conn, error) { return mergeConn{}, nil }

type mergeConn struct{}

func (mergeConn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("sharding merge: no statements")
}
func (mergeConn) Close() error { return nil }
func (mergeConn) Begin() (driver.Tx, error) {
	return nil, errors.New("sharding merge: no transactions")
}

// CheckNamedValue lets the *mergeResult through as the query argument.
func (mergeConn) CheckNamedValue(*driver.NamedValue) error { return nil }

func (mergeConn) QueryContext(_ context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if query != mergeQuery || len(args) != 1 {
		return nil, errors.New("sharding merge: unexpected query")
	}
	if e, ok := args[0].Value.(errArg); ok {
		return nil, e.err
	}
	r, ok := args[0].Value.(*mergeResult)
	if !ok {
		return nil, errors.New("sharding merge: unexpected argument")
	}
	return &mergeRows{r: r}, nil
}

// errArg, as the merge query's argument, makes the query fail with err.
type errArg struct{ err error }

// ErrRow returns a *sql.Row whose Scan returns err (served by the merge's
// in-process driver): a QueryRowContext that fails before it can query.
func ErrRow(ctx context.Context, err error) *sql.Row {
	return mergeDB().QueryRowContext(ctx, mergeQuery, errArg{err})
}

type mergeRows struct {
	r *mergeResult
	i int
}

func (m *mergeRows) Columns() []string {
	out := make([]string, len(m.r.cols))
	for i, c := range m.r.cols {
		out[i] = c.name
	}
	return out
}
func (m *mergeRows) Close() error { return nil }
func (m *mergeRows) Next(dest []driver.Value) error {
	if m.i >= len(m.r.rows) {
		return io.EOF
	}
	for i, v := range m.r.rows[m.i] {
		dest[i] = v
	}
	m.i++
	return nil
}
func (m *mergeRows) ColumnTypeDatabaseTypeName(i int) string { return m.r.cols[i].dbType }
func (m *mergeRows) ColumnTypeScanType(i int) reflect.Type {
	if t := m.r.cols[i].scan; t != nil {
		return t
	}
	return reflect.TypeFor[any]()
}
func (m *mergeRows) ColumnTypeNullable(i int) (bool, bool) {
	return m.r.cols[i].nullable, m.r.cols[i].nullOK
}
