package sharding

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"reflect"
	"slices"
	"strings"
	"sync"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/sharding/internal/clauses"
	"github.com/freshread/freshread/sharding/internal/sqltext"
	"github.com/freshread/freshread/sharding/merge"
)

type schemaField = schema.Field

// createPlan is the per-shard split of the rows of a Create.
type createPlan struct {
	rows    reflect.Value // the slice (or the single struct/map)
	single  bool
	byShard map[int][]int // shard index -> row indexes
	after   []int         // rows whose lookup pair is written after the insert (DB-assigned IDs)
	pairs   []Pair        // lookup pairs written before the insert (by execute, once routed)
	// partial: some rows were inserted by an earlier attempt (target.done)
	// and are left out; inserted: the rows inserted by this one.
	partial  bool
	inserted []int
	// given: the rows created with an ID of their own (not minted by this
	// statement), which an upsert may find already stored (keychange.go).
	given []givenRow
}

// prepareRows reads the key of every row to create, mints missing IDs,
// collects the lookup pairs (execute writes them before the rows, once the
// statement has passed the transaction checks) and groups the rows per
// shard.
// pinned: the shard is already chosen (hint); keys are still required
// only for IDs and the lookup.
func (s *Sharding) prepareRows(db *gorm.DB, tg *target, pinned bool) error {
	stmt := db.Statement
	t := tg.t
	ctx := stmt.Context
	rv := stmt.ReflectValue
	plan := &createPlan{rows: rv, byShard: map[int][]int{}}
	var rows []reflect.Value
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		for i := 0; i < rv.Len(); i++ {
			rows = append(rows, reflect.Indirect(rv.Index(i)))
		}
	case reflect.Struct, reflect.Map:
		plan.single = true
		rows = []reflect.Value{rv}
	default:
		return fmt.Errorf("%w: cannot read %q's key from a %s", ErrNoShardKey, t.Name, rv.Kind())
	}
	var keyField, idField *schema.Field
	if stmt.Schema != nil {
		keyField = stmt.Schema.LookUpField(t.Key)
		if t.ID != "" {
			idField = stmt.Schema.LookUpField(t.ID)
		}
	}
	var pairs []Pair
	for i, row := range rows {
		if _, ok := tg.done[i]; ok {
			plan.partial = true
			continue // inserted by an earlier attempt of the statement
		}
		key, ok := rowValue(ctx, row, keyField, t.Key)
		if !ok || key <= 0 {
			if pinned && s.cfg.IDs == nil && !t.Lookup {
				plan.byShard[tg.singleShard()] = append(plan.byShard[tg.singleShard()], i)
				continue
			}
			return fmt.Errorf("%w: row %d of %q has no %s", ErrNoShardKey, i, t.Name, t.Key)
		}
		si := tg.pl.key(key)
		if pinned {
			si = tg.singleShard()
		}
		plan.byShard[si] = append(plan.byShard[si], i)
		if t.ID == "" {
			continue
		}
		id, _ := rowValue(ctx, row, idField, t.ID)
		if id != 0 {
			plan.given = append(plan.given, givenRow{id: id, key: key, shard: si})
		}
		if id == 0 && s.cfg.IDs != nil {
			var err error
			if id, err = s.cfg.IDs.Next(s.routeCode(tg.pl.rt, key)); err != nil {
				return fmt.Errorf("sharding: mint an ID for %q: %w", t.Name, err)
			}
			if err := setRowValue(ctx, row, idField, t.ID, id); err != nil {
				return err
			}
		}
		if t.Lookup {
			if id == 0 {
				plan.after = append(plan.after, i)
			} else {
				pairs = append(pairs, Pair{OrderID: id, UserID: key})
			}
		}
	}
	plan.pairs = pairs
	if !pinned {
		tg.mask, tg.bounded, tg.reason = 0, true, "key"
		for si := range plan.byShard {
			tg.mask |= 1 << si
		}
	}
	tg.create = plan
	return nil
}

// shardOf is the shard row i of the plan goes to (-1: none).
func (plan *createPlan) shardOf(i int) int {
	for si, idx := range plan.byShard {
		if slices.Contains(idx, i) {
			return si
		}
	}
	return -1
}

func (tg *target) singleShard() int { return bits.TrailingZeros64(tg.mask) }

func rowValue(ctx context.Context, row reflect.Value, f *schema.Field, col string) (int64, bool) {
	switch row.Kind() {
	case reflect.Struct:
		if f == nil {
			return 0, false
		}
		v, zero := f.ValueOf(ctx, row)
		if zero {
			return 0, true
		}
		return intValue(v)
	case reflect.Map:
		for _, k := range mapKeys(f, col) {
			mv := row.MapIndex(reflect.ValueOf(k))
			if mv.IsValid() {
				return intValue(mv.Interface())
			}
		}
	}
	return 0, false
}

func setRowValue(ctx context.Context, row reflect.Value, f *schema.Field, col string, v int64) error {
	switch row.Kind() {
	case reflect.Struct:
		if f == nil {
			return fmt.Errorf("sharding: no field for column %q", col)
		}
		return f.Set(ctx, row, v)
	case reflect.Map:
		row.SetMapIndex(reflect.ValueOf(mapKeys(f, col)[0]), reflect.ValueOf(v))
	}
	return nil
}

func mapKeys(f *schema.Field, col string) []string {
	if f != nil && f.Name != f.DBName {
		return []string{f.DBName, f.Name}
	}
	return []string{col}
}

// execute runs the statement on the shards of tg and parks the default
// chain.
func (s *Sharding) execute(db *gorm.DB, tg *target) error {
	stmt := db.Statement
	n := bits.OnesCount64(tg.mask)
	tableName := ""
	if tg.t != nil {
		tableName = tg.t.Name
	}
	if s.cfg.OnRoute != nil {
		s.cfg.OnRoute(stmt.Context, Route{Table: tableName, Op: tg.op.String(), Shards: s.names(tg.mask, true), Reason: tg.reason})
	}
	nested, aerr := s.checkAssociations(db, tg)
	if aerr != nil {
		return aerr
	}
	if err := s.checkKeyChange(db, tg); err != nil {
		return err
	}
	undoPairs := func(error) {}
	var undoNested []func(error)
	for table, pairs := range nested {
		// Rows GORM saves with this one: their pairs first too.
		undo, perr := s.putPairs(stmt, table, pairs, false)
		if perr != nil {
			for _, u := range undoNested {
				u(perr)
			}
			return perr
		}
		undoNested = append(undoNested, undo)
	}
	if tg.create != nil && len(tg.create.pairs) > 0 && !tg.pairsPut {
		// Lookup first: an order never exists without its lookup row. (A
		// retried Create wrote them in its first attempt.) Undone if the
		// insert fails or its transaction rolls back (lookup_tx.go).
		var err error
		// With no row given an ID of its own, every ID was minted just
		// now: its pair is new, and the lookup need not say so.
		minted := len(tg.create.given) == 0
		if undoPairs, err = s.putPairs(stmt, tableName, tg.create.pairs, minted); err != nil {
			return err
		}
	}
	if n == 0 {
		// Contradictory keys (user_id = 1 AND user_id = 2 on other shards):
		// no row can match.
		var err error
		if stmt.RaiseErrorOnNotFound {
			err = gorm.ErrRecordNotFound
		}
		db.Error = &handled{err: err}
		return nil
	}
	var (
		merged bool
		plan   *merge.Plan
	)
	if !tg.write && n > 1 {
		if why := rawPending(tg); why != "" {
			return fmt.Errorf("%w: %s on %q over %d shards: %s", ErrScatterUnsupported, tg.op, tableName, n, why)
		}
		if why := scatterProblem(stmt, tg); why != "" {
			return fmt.Errorf("%w: %s on %q over %d shards: %s", ErrScatterUnsupported, tg.op, tableName, n, why)
		}
		if merged = merge.Needed(stmt, tg.op == opRow); merged && !tg.raw {
			var why string
			if plan, why = merge.New(stmt); why != "" {
				return fmt.Errorf("%w: %s on %q over %d shards: %s", ErrScatterUnsupported, tg.op, tableName, n, why)
			}
		}
	}
	var (
		rows int64
		err  error
		stx  *lazyTx
	)
	if n > 1 && tg.write && tg.tx == nil && tg.lazy == nil && !tg.pinned && !db.DryRun {
		// A write over several shards outside any transaction runs in a
		// transaction on each (statement_tx.go); a DryRun sends nothing.
		stx = s.statementTx(stmt.Context)
		tg.lazy, tg.many = stx, true
	}
	switch {
	case n == 1 && (tg.create == nil || !tg.create.partial):
		sh := s.shards[tg.singleShard()]
		sub := s.run(db, tg, sh, nil)
		rows, err = sub.RowsAffected, sub.Error
		if tg.op == opRow {
			stmt.Dest = sub.Statement.Dest
		}
		if tg.create != nil && len(tg.create.after) > 0 && err == nil {
			err = s.lookupAfter(db, tg, tg.create.after)
		}
	case tg.create != nil:
		rows, err = s.createSplit(db, tg)
	case tg.write:
		for m := tg.mask; m != 0 && err == nil; m &= m - 1 {
			si := bits.TrailingZeros64(m)
			sub := s.run(db, tg, s.shards[si], s.partMutator(tg, si, nil))
			rows += sub.RowsAffected
			if sub.Error != nil {
				err = fmt.Errorf("sharding: shard %q: %w", s.shards[si].name, sub.Error)
			}
		}
	case merged:
		rows, err = s.mergeRead(db, tg, plan)
	default:
		rows, err = s.scatterRead(db, tg)
	}
	if stx != nil {
		err = s.endStatementTx(tg, stx, err)
	}
	if tg.create != nil && err != nil {
		undoPairs(err)
	}
	if err != nil {
		for _, u := range undoNested {
			u(err)
		}
	}
	db.Error = &handled{err: err, rows: rows}
	return nil
}

// run executes a copy of the statement on one shard, through the shard's
// own callbacks (and so its freshread plugin).
func (s *Sharding) run(db *gorm.DB, tg *target, sh *shard, mutate func(*gorm.Statement)) *gorm.DB {
	sub := db.Session(&gorm.Session{Initialized: true})
	s.onShard(sub, tg, sh)
	if tg.tx != nil || tg.many {
		conn, err := s.txConn(db, tg, sh)
		if err != nil {
			sub.Error = err
			return sub
		}
		sub.Statement.ConnPool = conn
		if _, xa := conn.(*sql.Conn); xa && tg.lazy != nil {
			// An XA part (xa.go): GORM must not begin its own transaction
			// on the connection, which runs the XA transaction.
			cfg := *sub.Config
			cfg.SkipDefaultTransaction = true
			sub.Config = &cfg
		}
	}
	if (tg.split >= 0 || tg.rawParts != nil || tg.own) && mutate == nil {
		mutate = s.partMutator(tg, sh.index, nil)
	}
	if mutate != nil {
		mutate(sub.Statement)
	}
	cb := sh.db.Callback()
	switch tg.op {
	case opCreate:
		cb.Create().Execute(sub)
	case opQuery:
		cb.Query().Execute(sub)
	case opRow:
		cb.Row().Execute(sub)
	case opUpdate:
		cb.Update().Execute(sub)
	case opDelete:
		cb.Delete().Execute(sub)
	case opRaw:
		cb.Raw().Execute(sub)
	}
	return sub
}

// onShard points a cloned statement at shard sh: its configuration
// (callbacks, dialector) and pool, without the plugin's hints; a read of
// moving buckets from a move's target (AllowLag) is sent to the target's
// primary, which is what the move's caught-up time describes.
func (s *Sharding) onShard(sub *gorm.DB, tg *target, sh *shard) {
	sub.Config = sh.db.Config
	sub.Statement.ConnPool = sh.db.Config.ConnPool
	sub.Statement.Settings.Delete(hintKey)
	sub.Statement.Settings.Delete(lagKey)
	if tg.lagMask&(1<<sh.index) != 0 {
		ctx := sub.Statement.Context
		if ctx == nil {
			ctx = context.Background()
		}
		sub.Statement.Context = plugin.WithConsistency(ctx, plugin.Strong)
	}
}

// txConn returns the shard's own transaction of the statement's
// transaction: the shardTx's, or the lazyTx's (beginning it on sh).
func (s *Sharding) txConn(db *gorm.DB, tg *target, sh *shard) (gorm.ConnPool, error) {
	if tg.lazy != nil {
		return tg.lazy.shardConn(sh, tg.many)
	}
	if t, ok := db.Statement.ConnPool.(*shardTx); ok {
		return t.ConnPool, nil
	}
	return db.Statement.ConnPool, nil
}

// partMutator returns the statement change for shard si: its part of a
// split IN list, the ownership predicate (ownership.go), and a fresh
// destination when dest is set.
func (s *Sharding) partMutator(tg *target, si int, dest func(*gorm.Statement)) func(*gorm.Statement) {
	return func(st *gorm.Statement) {
		if tg.own {
			if e := tg.ownPredicate(si); e != nil {
				clauses.AndWhere(st, e)
			}
		}
		if part, ok := tg.rawParts[si]; ok {
			st.SQL.Reset()
			st.SQL.WriteString(part.sql)
			st.Vars = part.vars
		}
		if tg.split >= 0 {
			c := st.Clauses["WHERE"]
			w := c.Expression.(clause.Where)
			exprs := append([]clause.Expression(nil), w.Exprs...)
			exprs[tg.split] = clause.IN{Column: clause.Column{Table: clause.CurrentTable, Name: tg.splitCol}, Values: tg.splitParts[si]}
			c.Expression = clause.Where{Exprs: exprs}
			st.Clauses["WHERE"] = c
		}
		if dest != nil {
			dest(st)
		}
	}
}

// scatterProblem names what a multi-shard raw read would get wrong
// without a merge, or returns "". GORM statements are planned by
// merge.New instead; raw SQL is only concatenated.
func scatterProblem(stmt *gorm.Statement, tg *target) string {
	if !tg.raw {
		return ""
	}
	return rawScatterProblem(stmt.SQL.String())
}

// rawScatterProblem names what concatenating the shards' answers to the
// raw SQL text would get wrong, or returns "".
func rawScatterProblem(text string) string {
	toks := sqltext.Lex(text)
	for i, t := range toks {
		switch {
		case t.Is("order") || t.Is("group"):
			if i+1 < len(toks) && toks[i+1].Is("by") {
				return "raw SQL with " + strings.ToUpper(t.Text) + " BY (use the GORM API, which merges it)"
			}
		case t.Is("limit") || t.Is("offset") || t.Is("fetch") || t.Is("distinct") || t.Is("having") || t.Is("over"):
			return "raw SQL with " + strings.ToUpper(t.Text) + " (use the GORM API, which merges it)"
		}
	}
	if sqltext.Aggregate.MatchString(text) {
		return "raw SQL with an aggregate (use the GORM API, which merges it)"
	}
	return ""
}

// scatterRead runs a read on every shard of tg.mask concurrently and
// appends the rows to the destination in shard order.
func (s *Sharding) scatterRead(db *gorm.DB, tg *target) (int64, error) {
	stmt := db.Statement
	destPtr := reflect.ValueOf(stmt.Dest)
	sliceType := destPtr.Elem().Type()
	modelIsDest := sameRef(stmt.Model, stmt.Dest)

	type part struct {
		si   int
		dest reflect.Value
		sub  *gorm.DB
	}
	var parts []*part
	var subs []*gorm.DB
	for m := tg.mask; m != 0; m &= m - 1 {
		si := bits.TrailingZeros64(m)
		p := &part{si: si, dest: reflect.New(sliceType)}
		parts = append(parts, p)
		_ = subs
	}
	var wg sync.WaitGroup
	for _, p := range parts {
		sub := db.Session(&gorm.Session{Initialized: true}) // cloned here, not in the goroutines
		p.sub = sub
	}
	for _, p := range parts {
		wg.Add(1)
		go func(p *part) {
			defer wg.Done()
			sh := s.shards[p.si]
			p.sub = s.runPrepared(p.sub, tg, sh, s.partMutator(tg, p.si, func(st *gorm.Statement) {
				st.Dest = p.dest.Interface()
				if modelIsDest {
					st.Model = st.Dest
				}
			}))
		}(p)
	}
	wg.Wait()
	out := destPtr.Elem()
	out.Set(reflect.MakeSlice(sliceType, 0, out.Len()))
	var rows int64
	var errs []error
	for _, p := range parts {
		if p.sub.Error != nil {
			errs = append(errs, fmt.Errorf("sharding: shard %q: %w", s.shards[p.si].name, p.sub.Error))
			continue
		}
		out.Set(reflect.AppendSlice(out, p.dest.Elem()))
		rows += p.sub.RowsAffected
	}
	return rows, errors.Join(errs...)
}

// runPrepared is run on an already cloned session.
func (s *Sharding) runPrepared(sub *gorm.DB, tg *target, sh *shard, mutate func(*gorm.Statement)) *gorm.DB {
	s.onShard(sub, tg, sh)
	if mutate != nil {
		mutate(sub.Statement)
	}
	cb := sh.db.Callback()
	if tg.op == opRaw {
		cb.Raw().Execute(sub)
	} else {
		cb.Query().Execute(sub)
	}
	return sub
}

func sameRef(a, b any) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	return va.IsValid() && vb.IsValid() && va.Kind() == reflect.Pointer && vb.Kind() == reflect.Pointer &&
		va.Type() == vb.Type() && va.Pointer() == vb.Pointer()
}

// createSplit inserts a batch that spans shards: one INSERT per shard, in
// shard order, each in its shard's transaction of the statement
// (statement_tx.go) or of the caller's transaction.
func (s *Sharding) createSplit(db *gorm.DB, tg *target) (int64, error) {
	stmt := db.Statement
	plan := tg.create
	rv := plan.rows
	sliceType := rv.Type()
	if rv.Kind() == reflect.Array {
		sliceType = reflect.SliceOf(rv.Type().Elem())
	}
	modelIsDest := sameRef(stmt.Model, stmt.Dest)
	var rows int64
	for m := tg.mask; m != 0; m &= m - 1 {
		si := bits.TrailingZeros64(m)
		idx := plan.byShard[si]
		part := reflect.MakeSlice(sliceType, 0, len(idx))
		for _, i := range idx {
			part = reflect.Append(part, rv.Index(i))
		}
		ptr := reflect.New(sliceType)
		ptr.Elem().Set(part)
		sub := s.run(db, tg, s.shards[si], func(st *gorm.Statement) {
			st.Dest = ptr.Interface()
			if modelIsDest {
				st.Model = st.Dest
			}
		})
		if sub.Error != nil {
			return rows, fmt.Errorf("sharding: shard %q: %w", s.shards[si].name, sub.Error)
		}
		plan.inserted = append(plan.inserted, idx...)
		rows += sub.RowsAffected
		// Copy back what the insert filled in (IDs, timestamps) when the
		// elements are values.
		got := ptr.Elem()
		for j, i := range idx {
			if dst := rv.Index(i); dst.CanSet() {
				dst.Set(got.Index(j))
			}
		}
		if len(plan.after) > 0 {
			var after []int
			for _, i := range plan.after {
				if s.shardIndexOfRow(db, tg, i) == si {
					after = append(after, i)
				}
			}
			if err := s.lookupAfter(db, tg, after); err != nil {
				return rows, err
			}
		}
	}
	return rows, nil
}

func (s *Sharding) shardIndexOfRow(db *gorm.DB, tg *target, i int) int {
	for si, idx := range tg.create.byShard {
		for _, j := range idx {
			if j == i {
				return si
			}
		}
	}
	return -1
}

// lookupAfter writes the lookup pairs of rows whose IDs the database
// assigned (they could not be written first).
func (s *Sharding) lookupAfter(db *gorm.DB, tg *target, idx []int) error {
	stmt := db.Statement
	plan := tg.create
	var keyField, idField *schema.Field
	if stmt.Schema != nil {
		keyField, idField = stmt.Schema.LookUpField(tg.t.Key), stmt.Schema.LookUpField(tg.t.ID)
	}
	var pairs []Pair
	for _, i := range idx {
		row := plan.rows
		if !plan.single {
			row = reflect.Indirect(plan.rows.Index(i))
		}
		key, _ := rowValue(stmt.Context, row, keyField, tg.t.Key)
		id, _ := rowValue(stmt.Context, row, idField, tg.t.ID)
		if id != 0 {
			pairs = append(pairs, Pair{OrderID: id, UserID: key})
		}
	}
	if len(pairs) == 0 {
		return nil
	}
	fresh, err := s.putLookup(stmt.Context, pairs, false)
	if err != nil {
		return fmt.Errorf("sharding: write the lookup of %q after the insert: %w", tg.t.Name, err)
	}
	if l := tg.lookupRecord(stmt); l != nil {
		l.addPut(s.cfg.Lookup, pairIDs(pairs), fresh)
	}
	return nil
}

// lookupCleanup deletes the lookup rows of deleted orders: the IDs the
// DELETE named (ids, over all its attempts) that no longer exist on their
// shard. It runs once the statement is done, after any check of stale
// pairs (lookup_stale.go): a stale pair would send it to a shard without
// the row, and it would delete the pair of a row still stored.
func (s *Sharding) lookupCleanup(db *gorm.DB, tg *target, ids []int64) error {
	ctx := db.Statement.Context
	shardOfID, err := s.resolveIDs(ctx, tg.pl, ids)
	if err != nil {
		return nil // the rows are gone; stale lookup rows are tolerated
	}
	byShard := map[int][]int64{}
	for _, id := range ids {
		if si, ok := shardOfID[id]; ok {
			byShard[si] = append(byShard[si], id)
		}
	}
	var gone []int64
	for si, ids := range byShard {
		conn := s.shards[si].db.Session(&gorm.Session{Context: ctx, NewDB: true})
		if tg.tx != nil || tg.many {
			if conn.Statement.ConnPool, err = s.txConn(db, tg, s.shards[si]); err != nil {
				return nil
			}
		}
		var left []int64
		if err := conn.Table(tg.t.Name).Where(clause.IN{Column: clause.Column{Name: tg.t.ID}, Values: toAny(ids)}).
			Pluck(tg.t.ID, &left).Error; err != nil {
			return nil
		}
		have := make(map[int64]bool, len(left))
		for _, id := range left {
			have[id] = true
		}
		for _, id := range ids {
			if !have[id] {
				gone = append(gone, id)
			}
		}
	}
	if len(gone) == 0 {
		return nil
	}
	if l := tg.lookupRecord(db.Statement); l != nil {
		l.addGone(s.cfg.Lookup, gone) // deleted once the transaction commits
		return nil
	}
	if err := s.cfg.Lookup.Delete(ctx, gone); err != nil {
		return fmt.Errorf("sharding: delete the lookup rows of deleted %q: %w", tg.t.Name, err)
	}
	return nil
}

func toAny(ids []int64) []any {
	out := make([]any, len(ids))
	for i, v := range ids {
		out[i] = v
	}
	return out
}
