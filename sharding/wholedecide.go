package sharding

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"gorm.io/gorm"
	gormcb "gorm.io/gorm/callbacks"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/sharding/internal/sqltext"
)

// wholeVerdict is where a statement read whole may run.
type wholeVerdict struct {
	// mask, bounded: the shards every sharded reference is pinned to
	// (bounded false: some reference is not pinned).
	mask    uint64
	bounded bool
	// colocated: one query block whose sharded tables are all joined on
	// the shard key (or a single table), not an INSERT into one: each
	// shard's answer is the answer for the rows it holds, so the
	// statement may run on several shards (split, scattered) as a
	// statement on one table does.
	colocated bool
	// single: one reference to one table, not an INSERT: nothing for the
	// router to see whole; the verdict only reads its alias.
	single bool
	// tables: the sharded tables a co-located statement reads (a merge
	// compares text by their columns' collations).
	tables []string
}

// wholeStatement checks a statement the router must see whole (whole.go)
// after analyze: it routes it to the one shard every part pins, lets a
// co-located statement go on as analyzed, or refuses it before anything
// runs.
func (s *Sharding) wholeStatement(db *gorm.DB, tg *target) error {
	stmt := db.Statement
	var text string
	var vars []any
	if tg.raw {
		text, vars = stmt.SQL.String(), stmt.Vars
	} else {
		var ok bool
		if text, vars, ok = gormWholeText(db, tg.op); !ok {
			return nil
		}
	}
	v, err := s.decideWhole(stmt.Context, tg, text, vars)
	if err != nil {
		return err
	}
	tg.joined = v.tables
	switch {
	case v.single || (v.colocated && !v.bounded):
		if !tg.bounded && v.bounded { // an alias the top-level WHERE did not read
			tg.mask, tg.bounded, tg.reason = v.mask, true, "key"
			tg.split, tg.rawParts = -1, nil
		}
	case v.colocated && tg.bounded && tg.mask == v.mask:
		// As analyzed (with its IN list split per shard).
	default:
		if v.mask == 0 {
			// Every sharded part matches no row: any one database answers.
			v.mask = tg.pl.rt.owning & -tg.pl.rt.owning
		}
		tg.mask, tg.bounded, tg.reason = v.mask, true, "whole"
		tg.split, tg.rawParts = -1, nil
	}
	return nil
}

// decideWhole reads text and decides where it may run; the error wraps
// ErrCrossShard or ErrUnsupportedStatement.
func (s *Sharding) decideWhole(ctx context.Context, tg *target, text string, vars []any) (wholeVerdict, error) {
	st := readWhole(text, s.tables)
	what := tg.op.String()
	if tg.raw {
		what = "raw SQL"
	}
	if st.failed == "" {
		// Every sharded table the classifier names must be a reference
		// the router read; otherwise it cannot tell where it goes.
		r := s.classifier.Classify(text)
		seen := map[string]bool{}
		for _, b := range st.blocks {
			for _, ref := range b.refs {
				seen[ref.name] = true
			}
		}
		for _, n := range append(append([]string(nil), r.Writes...), r.Reads...) {
			if n = sqltext.NormalizeTable(n); s.tables[n] != nil && !seen[n] {
				st.failed = fmt.Sprintf("the sharded table %q appears where the router does not read tables", n)
			}
		}
		if r.UnknownTables && st.compound {
			st.failed = "the tables it reads cannot be named"
		}
	}
	if st.failed != "" {
		if !st.compound {
			return wholeVerdict{single: true}, nil // as analyzed
		}
		return wholeVerdict{}, fmt.Errorf("%w: %s on %q: the router cannot read the statement whole (%s); run it with a shard hint (sharding.Shard) if it belongs on one shard, or split it", ErrUnsupportedStatement, what, tg.t.Name, st.failed)
	}
	var sharded, other []*wRef
	insert := false
	for _, b := range st.blocks {
		for _, r := range b.refs {
			switch {
			case r.t != nil:
				sharded = append(sharded, r)
				insert = insert || r.ins
			case !st.ctes[r.name] && !classify.IsCatalogTable(r.name):
				other = append(other, r)
			}
		}
	}
	if len(other) > 0 && len(sharded) > 0 {
		o := other[0]
		return wholeVerdict{}, fmt.Errorf("%w: %s: %s reads %q, which lives on the default database, with the sharded table %q, which lives on the shards; no database holds both: read them in separate statements", ErrUnsupportedStatement, what, st.where(o), o.name, sharded[0].name)
	}
	if len(sharded) == 0 {
		return wholeVerdict{single: true}, nil
	}
	masks, bounded, err := s.pinRefs(ctx, tg.pl, st, vars)
	if err != nil {
		return wholeVerdict{}, fmt.Errorf("sharding: resolve order IDs of %q: %w", tg.t.Name, err)
	}
	v := wholeVerdict{bounded: true}
	for _, r := range sharded {
		if !bounded[r] {
			v.bounded = false
			continue
		}
		v.mask |= masks[r]
	}
	if !st.compound {
		if insert || !v.bounded {
			return wholeVerdict{single: true}, nil // an INSERT's shard is its rows'
		}
		v.single = true
		return v, nil
	}
	v.colocated = len(st.blocks) == 1 && !insert && st.colocated(st.blocks[0])
	if v.colocated {
		for _, r := range sharded {
			if !slices.Contains(v.tables, r.t.Name) {
				v.tables = append(v.tables, r.t.Name)
			}
		}
		if !v.bounded {
			v.mask = 0
		}
		return v, nil
	}
	if !v.bounded {
		for _, r := range sharded {
			if !bounded[r] {
				return wholeVerdict{}, fmt.Errorf("%w: %s: %s reads the sharded table %q without pinning it to a shard (%s = a value or list, or a join on %s with a pinned table); the statement runs whole on one database, so every part must name its users, or be split into statements of one part each", ErrUnsupportedStatement, what, st.where(r), r.name, r.t.key, r.t.key)
			}
		}
	}
	if bits.OnesCount64(v.mask) > 1 && tg.raw && !tg.write && st.concatenable() && rawScatterProblem(text) == "" {
		return v, nil // each shard's answer is its rows of every part: concatenated
	}
	if bits.OnesCount64(v.mask) > 1 {
		a := sharded[0]
		for _, r := range sharded {
			if masks[r] != masks[a] {
				return wholeVerdict{}, fmt.Errorf("%w: %s: %s reads shards %v and %s reads shards %v; the statement runs whole on one database, so every part must pin the same shard: split it into one statement per shard and combine the answers", ErrCrossShard, what, st.where(a), s.names(masks[a], true), st.where(r), s.names(masks[r], true))
			}
		}
		return wholeVerdict{}, fmt.Errorf("%w: %s: %s reads shards %v; a statement of several parts runs whole on one database: split it into one statement per shard and combine the answers", ErrCrossShard, what, st.where(a), s.names(masks[a], true))
	}
	return v, nil
}

// concatenable reports whether the statement is parts joined by UNION ALL
// alone, each one query block (no CTE, no subquery) that reads the
// sharded tables alone, joined on the key, and writes nothing. Run whole
// on a shard, each part then returns the rows of its users that the
// shard holds, and nothing for the users of other shards: the answer of
// one database holding every row is the shards' answers concatenated
// (when no ORDER BY, LIMIT, DISTINCT, aggregate or window applies to it:
// rawScatterProblem; and no move is in progress: rawPending).
func (st *wStmt) concatenable() bool {
	if !st.unionAll || st.otherSetOp || len(st.ctes) > 0 {
		return false
	}
	for _, b := range st.blocks {
		if b.outer != nil || len(b.refs) == 0 || !st.colocated(b) {
			return false
		}
		for _, r := range b.refs {
			if r.t == nil || r.write || r.ins {
				return false
			}
		}
	}
	return true
}

// where names a reference for messages.
func (st *wStmt) where(r *wRef) string {
	out := fmt.Sprintf("%q", r.name)
	if r.qual != r.name {
		out += " AS " + r.qual
	}
	if r.block.label != "" {
		out += " in " + r.block.label
	}
	return out
}

// refCol is a column of a table reference.
type refCol struct {
	ref *wRef
	col string
}

// resolve finds the reference a column identifier of block b belongs to:
// by its qualifier in b, then in the blocks around it; an unqualified
// column by the one sharded table of b that has it.
func (st *wStmt) resolve(ident string, b *wBlock) refCol {
	qual, col := "", strings.ToLower(ident)
	if i := strings.LastIndexByte(ident, '.'); i >= 0 {
		qual, col = ident[:i], strings.ToLower(ident[i+1:])
		if j := strings.LastIndexByte(qual, '.'); j >= 0 {
			qual = qual[j+1:]
		}
	}
	if qual == "" {
		var found *wRef
		for _, r := range b.refs {
			if r.t != nil && (r.t.key == col || r.t.id == col) {
				if found != nil {
					return refCol{}
				}
				found = r
			}
		}
		return refCol{found, col}
	}
	for blk := b; blk != nil; blk = blk.outer {
		for _, r := range blk.refs {
			if r.qual == qual {
				return refCol{r, col}
			}
		}
	}
	return refCol{}
}

// unionFind groups the columns a block equates.
type unionFind map[refCol]refCol

func (u unionFind) find(x refCol) refCol {
	for {
		p, ok := u[x]
		if !ok || p == x {
			return x
		}
		x = p
	}
}

func (u unionFind) union(a, b refCol) {
	if a.ref == nil || b.ref == nil {
		return
	}
	for _, x := range []refCol{a, b} {
		if _, ok := u[x]; !ok {
			u[x] = x
		}
	}
	ra, rb := u.find(a), u.find(b)
	if ra != rb {
		u[ra] = rb
	}
}

// equate adds the column equalities of the top-level AND members of sp
// (nothing when an OR is at its top).
func (st *wStmt) equate(u unionFind, sp tokSpan, b *wBlock) {
	toks := st.toks
	var members []tokSpan
	start := sp.from
	for i := sp.from; i <= sp.to; i++ {
		if i < sp.to {
			t := toks[i]
			if t.IsOp("(") && st.closing[i] > 0 {
				i = st.closing[i]
				continue
			}
			if t.Is("or") {
				return
			}
			if !t.Is("and") {
				continue
			}
			if i > start+1 && toks[i-2].Is("between") {
				continue
			}
		}
		members = append(members, tokSpan{start, i})
		start = i + 1
	}
	for _, m := range members {
		for m.to-m.from == 3 && toks[m.from].IsOp("(") && st.closing[m.from] == m.to-1 {
			m = tokSpan{m.from + 1, m.to - 1}
		}
		if m.to-m.from == 3 && toks[m.from].Kind == sqltext.Ident && toks[m.from+1].IsOp("=") && toks[m.from+2].Kind == sqltext.Ident {
			u.union(st.resolve(toks[m.from].Text, b), st.resolve(toks[m.from+2].Text, b))
		}
	}
}

// equateUsing adds the key equalities of r's USING list: with every
// sharded table before it in its block that has the same key column.
func equateUsing(u unionFind, r *wRef) {
	if r.t == nil {
		return
	}
	for _, c := range r.using {
		if c != r.t.key {
			continue
		}
		for _, o := range r.block.refs {
			if o == r {
				break
			}
			if o.t != nil && o.t.key == c {
				u.union(refCol{r, c}, refCol{o, c})
			}
		}
	}
}

// usable returns the conditions that constrain the rows of r that the
// block reads: its WHERE, the ON of its inner joins, and r's own ON when
// r is LEFT JOINed.
func usable(r *wRef) []tokSpan {
	b := r.block
	out := []tokSpan{b.where}
	for _, o := range b.refs {
		if o.on.to > o.on.from && (o.join == joinInner || (o == r && o.join == joinLeft)) {
			out = append(out, o.on)
		}
	}
	return out
}

// colocated reports whether every sharded table of block b is joined to
// the others on the shard key (by any join's ON or USING, or the WHERE).
func (st *wStmt) colocated(b *wBlock) bool {
	u := unionFind{}
	st.equate(u, b.where, b)
	for _, r := range b.refs {
		if r.on.to > r.on.from {
			st.equate(u, r.on, b)
		}
		equateUsing(u, r)
	}
	var root refCol
	for _, r := range b.refs {
		if r.t == nil {
			continue
		}
		x := u.find(refCol{r, r.t.key})
		if root.ref == nil {
			root = x
		} else if x != root {
			return false
		}
	}
	return true
}

// pinRefs computes the shards each sharded reference is pinned to by the
// conditions of its block (and, through a correlated equality on the key,
// of the blocks around it).
func (s *Sharding) pinRefs(ctx context.Context, pl placer, st *wStmt, vars []any) (map[*wRef]uint64, map[*wRef]bool, error) {
	type pin struct {
		c     *cond
		links []*wRef // outer references r's key is equated with
	}
	pins := map[*wRef]*pin{}
	var order []*wRef
	var ids []int64
	for _, b := range st.blocks {
		for _, r := range b.refs {
			if r.t == nil {
				continue
			}
			spans := usable(r)
			u := unionFind{}
			for _, sp := range spans {
				st.equate(u, sp, b)
			}
			for _, o := range b.refs {
				if o.join == joinInner || o == r {
					equateUsing(u, o)
				}
			}
			own := u.find(refCol{r, r.t.key})
			match := func(ident string) int {
				rc := st.resolve(ident, b)
				switch {
				case rc.ref == nil:
					return 0
				case rc.ref.t != nil && rc.col == rc.ref.t.key && u.find(rc) == own:
					return colKey
				case rc.ref == r && r.t.id != "" && rc.col == r.t.id:
					return colID
				}
				return 0
			}
			p := &pin{}
			var c *cond
			for _, sp := range spans {
				if sp.to <= sp.from {
					continue
				}
				k := st.parseSpan(sp, vars, match)
				if c == nil {
					c = k
				} else {
					c = joinCond(opAnd, &cond{op: opAnd, kids: []*cond{c}}, k)
				}
			}
			if c == nil {
				c = otherCond
			}
			p.c = c
			for x := range u {
				if x.ref != nil && x.ref != r && x.ref.t != nil && x.col == x.ref.t.key && u.find(x) == own {
					p.links = append(p.links, x.ref)
				}
			}
			pins[r] = p
			order = append(order, r)
			ids = collectIDs(c, ids)
		}
	}
	var shardOfID map[int64]int
	if len(ids) > 0 {
		var err error
		shardOfID, err = s.resolveIDs(ctx, pl, ids)
		if err != nil && len(shardOfID) < len(ids) {
			return nil, nil, err
		}
	}
	masks, bounded := map[*wRef]uint64{}, map[*wRef]bool{}
	for _, r := range order {
		if r.ins {
			// The rows an INSERT writes are placed by their own keys, not
			// by the condition of the SELECT or upsert beside it.
			continue
		}
		masks[r], bounded[r] = s.eval(pl, pins[r].c, shardOfID)
	}
	// A reference whose key is equated with another's is pinned where the
	// other is. Blocks come before the blocks inside them, so an outer
	// reference is final when an inner one reads it; a second pass
	// carries a pin back to an earlier reference of the same block.
	for _, r := range append(order, order...) {
		if r.ins {
			continue
		}
		for _, o := range pins[r].links {
			if !bounded[o] {
				continue
			}
			if bounded[r] {
				masks[r] &= masks[o]
			} else {
				masks[r], bounded[r] = masks[o], true
			}
		}
	}
	return masks, bounded, nil
}

// parseSpan parses the condition in sp; "?" placeholders before it
// consume variables too.
func (st *wStmt) parseSpan(sp tokSpan, vars []any, match columnMatcher) *cond {
	before := 0
	for _, t := range st.toks[:sp.from] {
		if t.Kind == sqltext.Param && t.Param < 0 {
			before++
		}
	}
	p := &textParser{toks: st.toks[sp.from:sp.to], vars: vars, next: before, match: match}
	c := p.parseOr()
	if p.pos != len(p.toks) {
		return otherCond
	}
	return c
}

// gormWholeText renders a statement built with the GORM API that the
// router must see whole (joins, subqueries in its WHERE) as the SQL it
// will run, on a dry-run copy; ok is false for any other statement.
func gormWholeText(db *gorm.DB, op opKind) (text string, vars []any, ok bool) {
	stmt := db.Statement
	need := len(stmt.Joins) > 0
	if f, isFrom := stmt.Clauses["FROM"].Expression.(clause.From); isFrom && len(f.Joins) > 0 {
		need = true
	}
	if w, isWhere := stmt.Clauses["WHERE"].Expression.(clause.Where); isWhere && hasSubquery(w) {
		need = true
	}
	// Update("col", subquery), Updates(map[string]any{"col": subquery}).
	var setSubs []any
	if op == opUpdate {
		if m, isMap := stmt.Dest.(map[string]any); isMap {
			for _, v := range m {
				if hasSubquery(clause.Expr{Vars: []any{v}}) || hasSubquery(asExpr(v)) {
					setSubs = append(setSubs, v)
				}
			}
		}
	}
	need = need || len(setSubs) > 0
	if !need {
		return "", nil, false
	}
	sub := db.Session(&gorm.Session{Initialized: true, DryRun: true})
	sub.Statement.SQL.Reset()
	sub.Statement.Vars = nil
	switch op {
	case opQuery, opRow:
		sub.Statement.BuildClauses = stmt.BuildClauses // not cloned
		gormcb.BuildQuerySQL(sub)
	default:
		sub.Statement.SQL.WriteString("SELECT *")
		for _, v := range setSubs {
			sub.Statement.SQL.WriteString(", (")
			sub.Statement.AddVar(sub.Statement, v)
			sub.Statement.SQL.WriteString(")")
		}
		sub.Statement.SQL.WriteString(" FROM ")
		if stmt.TableExpr != nil {
			sub.Statement.SQL.WriteString(stmt.TableExpr.SQL)
		} else {
			sub.Statement.WriteQuoted(stmt.Table)
		}
		sub.Statement.SQL.WriteByte(' ')
		sub.Statement.Build("WHERE")
	}
	return sub.Statement.SQL.String(), sub.Statement.Vars, true
}

// subqueryText reports whether GORM is rendering a *gorm.DB variable (a
// subquery) into the text of the statement that holds it: it runs the
// Query chain of a DryRun copy without a destination. Nothing runs; the
// default chain writes the text, which the statement holding it is
// routed with (wholeStatement reads its subqueries).
func subqueryText(db *gorm.DB, op opKind) bool {
	return op == opQuery && db.DryRun && db.Statement.Dest == nil
}

// hasSubquery reports whether a condition holds a subquery (a *gorm.DB
// variable, or SELECT in its text).
func hasSubquery(e clause.Expression) bool {
	sub := func(vars []any) bool {
		for _, v := range vars {
			if _, ok := v.(*gorm.DB); ok {
				return true
			}
		}
		return false
	}
	text := func(sql string) bool { return strings.Contains(strings.ToLower(sql), "select") }
	switch x := e.(type) {
	case clause.Where:
		return anySubquery(x.Exprs)
	case clause.AndConditions:
		return anySubquery(x.Exprs)
	case clause.OrConditions:
		return anySubquery(x.Exprs)
	case clause.NotConditions:
		return anySubquery(x.Exprs)
	case clause.Expr:
		return text(x.SQL) || sub(x.Vars)
	case *clause.Expr:
		return x != nil && (text(x.SQL) || sub(x.Vars))
	case clause.NamedExpr:
		return text(x.SQL) || sub(x.Vars)
	case clause.Eq:
		return sub([]any{x.Value})
	case clause.Neq:
		return sub([]any{x.Value})
	case clause.IN:
		return sub(x.Values)
	}
	return false
}

// asExpr is v as a clause expression (gorm.Expr), or nil.
func asExpr(v any) clause.Expression {
	switch x := v.(type) {
	case clause.Expr:
		return x
	case *clause.Expr:
		return x
	}
	return nil
}

func anySubquery(es []clause.Expression) bool {
	for _, e := range es {
		if hasSubquery(e) {
			return true
		}
	}
	return false
}
