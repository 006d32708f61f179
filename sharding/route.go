package sharding

import (
	"errors"
	"fmt"
	"math/bits"
	"reflect"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/callbacks"
	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/sharding/internal/sqltext"
)

type opKind uint8

const (
	opCreate opKind = iota
	opQuery
	opRow
	opUpdate
	opDelete
	opRaw
)

var opNames = [...]string{"create", "query", "row", "update", "delete", "raw"}

func (o opKind) String() string { return opNames[o] }

// shardHooks is the sharding plugin's side of callbacks.Sharding:
// package callbacks registers it, on every chain, the router first (it
// runs the statement on its shard's own *gorm.DB, so the shard's freshread
// plugin routes it, and then parks the default chain with a marker error)
// and the finisher last (it replaces the marker with the shard's result).
type shardHooks struct {
	routers [len(opNames)]func(*gorm.DB) // by opKind, which follows callbacks.Chain
}

var _ callbacks.Sharding = (*shardHooks)(nil)

func newShardHooks(s *Sharding) *shardHooks {
	h := &shardHooks{}
	for op := range h.routers {
		h.routers[op] = s.router(opKind(op))
	}
	return h
}

func (h *shardHooks) Route(c callbacks.Chain, db *gorm.DB) { h.routers[c](db) }
func (h *shardHooks) Finish(db *gorm.DB)                   { finish(db) }

// handled parks the default chain: every GORM callback skips work when
// db.Error is set. finish replaces it with the shard's outcome.
type handled struct {
	err  error
	rows int64
}

func (h *handled) Error() string { return "sharding: statement ran on its shard" }

func finish(db *gorm.DB) {
	var h *handled
	if db.Error != nil && errors.As(db.Error, &h) {
		db.Error = h.err
		db.RowsAffected = h.rows
	}
}

func (s *Sharding) router(op opKind) func(*gorm.DB) {
	return func(db *gorm.DB) {
		if db.Error != nil || subqueryText(db, op) {
			return
		}
		if err := s.route(db, op); err != nil {
			db.AddError(err)
		}
	}
}

// target is where a statement goes.
type target struct {
	t       *tableInfo
	joined  []string // the sharded tables a co-located join reads (wholedecide.go)
	op      opKind
	write   bool
	raw     bool
	mask    uint64
	bounded bool
	reason  string
	tx      *shard // the statement runs inside this shard's transaction
	// lazy: the transaction begun on the default database (tx.go), which
	// binds to tx; many: CreateInBatches' own, which may span shards.
	lazy *lazyTx
	many bool
	// rolledBack: the statement wrote over several shards in its own
	// transactions (statement_tx.go), and they were rolled back: nothing
	// of it stays.
	rolledBack bool
	// split: the top-level WHERE member index whose IN list is split per
	// shard, and the values per shard index.
	split      int
	splitCol   string
	splitParts map[int][]any
	// rawParts: raw SQL whose IN list is split, the text per shard index.
	rawParts map[int]rawPart
	// ids: order IDs named by the condition (for the lookup cleanup and
	// the check of stale pairs), and the shard each resolved to.
	ids     []int64
	idShard map[int64]int
	// cond: the statement's condition as analyze read it (nil for a
	// Create, or when a hint chose the shard).
	cond *cond
	// create: the rows of a Create per shard.
	create *createPlan

	// pl places keys and IDs: the statement's one snapshot of the map.
	pl placer
	// lagMask: the shards a read that accepts a lag reads moving buckets
	// from (AllowLag); they are read on their primary.
	lagMask uint64
	// pinned: a hint or a pinned session chose the shard.
	pinned bool
	// own: each shard's statement reads only the rows it owns in the
	// snapshot (ownership.go); ownLag: what each shard owns for a read
	// that accepts a lag (nil: the snapshot's own table).
	own    bool
	ownLag []shardOwn
	// From earlier attempts of the statement (guard_retry.go): the rows of
	// a Create already inserted (row index -> the shard that took it), and
	// whether its lookup pairs are written.
	done     map[int]int
	pairsPut bool
}

// route routes the statement and runs it on its shards; a statement a
// shard refused with the guard's error is routed again with the
// refreshed map where that is safe (guard_retry.go), and one routed by
// stale lookup pairs with the corrected pairs (lookup_stale.go). Once it
// is done, a Delete's lookup pairs are cleaned up.
func (s *Sharding) route(db *gorm.DB, op opKind) error {
	var at attempt
	for {
		if err := s.routeOnce(db, op, &at); err != nil {
			return err
		}
		if s.retryStalePairs(db, op, &at) {
			continue
		}
		if !s.retryGuarded(db, op, &at) {
			s.done(db, &at)
			return nil
		}
	}
}

// done completes the outcome of the statement's last attempt: the rows
// an earlier attempt changed (lookup_stale.go), and the lookup pairs of
// the orders a Delete removed.
func (s *Sharding) done(db *gorm.DB, at *attempt) {
	tg := at.tg
	h, ok := db.Error.(*handled)
	if tg == nil || !ok {
		return
	}
	h.rows += at.rows
	if h.err != nil && tg.op == opCreate {
		var none bool
		if none, h.err = s.undoSplitCreate(db, tg, at, h.err); none {
			h.rows, at.rows = 0, 0
		}
	}
	ids := append(at.ids, tg.ids...)
	if h.err == nil && tg.op == opDelete && tg.t.Lookup && len(ids) > 0 {
		h.err = s.lookupCleanup(db, tg, ids)
	}
}

func (s *Sharding) routeOnce(db *gorm.DB, op opKind, at *attempt) error {
	stmt := db.Statement
	tg := &target{op: op, split: -1, raw: stmt.SQL.Len() > 0, pl: placer{rt: s.rt.Load()}}
	at.tg = nil

	var pinned *shard
	defaultTx := false
	switch c := stmt.ConnPool.(type) {
	case *shardTx:
		tg.tx = c.sh
	case *shardPool:
		pinned = c.sh
	case *lazyTx:
		tg.lazy = c
	case gorm.TxCommitter:
		defaultTx = true
	}
	if tg.raw {
		followSavepoint(stmt)
	}
	if v, ok := stmt.Settings.Load(hintKey); ok {
		name, _ := v.(string)
		sh := s.byName[name]
		if sh == nil {
			return fmt.Errorf("%w: hint names %q", ErrUnknownShard, name)
		}
		pinned = sh
	}

	// Which sharded table does the statement touch?
	hasTables := false
	if tg.raw {
		r := s.classifier.Classify(stmt.SQL.String())
		tg.write = r.Kind != classify.Read
		hasTables = len(r.Reads) > 0 || len(r.Writes) > 0 || r.UnknownTables
		for _, n := range append(append([]string(nil), r.Writes...), r.Reads...) {
			if ti := s.tables[sqltext.NormalizeTable(n)]; ti != nil {
				tg.t = ti
				break
			}
		}
	} else {
		if stmt.Table == "" && stmt.Model != nil {
			_ = stmt.Parse(stmt.Model)
		}
		hasTables = stmt.Table != ""
		name := stmt.Table // GORM sets it to the alias of db.Table("orders o")
		if stmt.TableExpr != nil {
			n, err := s.tableExprName(stmt.TableExpr)
			if err != nil {
				return err
			}
			name = n
		}
		tg.t = s.tables[sqltext.NormalizeTable(name)]
		tg.write = op == opCreate || op == opUpdate || op == opDelete
	}

	if lz := tg.lazy; lz != nil {
		if tg.t != nil && !tg.raw && op == opCreate && lz.batch() {
			tg.many = true // each batch may reach other shards
		} else if sh := lz.boundShard(); sh != nil {
			tg.tx = sh
		}
	}

	if tg.t == nil {
		// Not a sharded table.
		switch {
		case tg.lazy != nil && tg.tx == nil && pinned != nil:
			tg.tx = pinned // a hint binds the transaction to its shard
			tg.mask, tg.bounded, tg.reason = 1<<pinned.index, true, "hint"
			return s.execute(db, tg)
		case tg.lazy != nil && tg.tx == nil:
			if op == opRaw && !hasTables {
				// SAVEPOINT, SET LOCAL...: kept for the database the
				// transaction binds to, unless it is bound already.
				queued, err := tg.lazy.queue(stmt.SQL.String())
				if err != nil {
					return err
				}
				if queued {
					db.Error = &handled{}
					return nil
				}
			}
			conn, err := tg.lazy.defaultConn()
			if err != nil {
				return err
			}
			stmt.ConnPool = conn
			return nil
		case tg.tx == nil && pinned == nil:
			if dp, ok := stmt.ConnPool.(*defaultPool); ok {
				// The default database's own chain: its default
				// transaction begins on its own pool (the freshread
				// primary pool), not as a lazyTx.
				stmt.ConnPool = dp.ConnPool
			}
			return nil
		case tg.tx != nil && hasTables:
			return fmt.Errorf("%w: table %q lives on the default database, the transaction on shard %q", ErrCrossShard, stmt.Table, tg.tx.name)
		case tg.tx != nil:
			if pinned != nil && pinned != tg.tx {
				return fmt.Errorf("%w: hint %q in a transaction on %q", ErrCrossShard, pinned.name, tg.tx.name)
			}
			tg.mask, tg.bounded, tg.reason = 1<<tg.tx.index, true, "transaction"
			return s.execute(db, tg)
		case pinned != nil:
			tg.mask, tg.bounded, tg.reason = 1<<pinned.index, true, "hint"
			return s.execute(db, tg)
		}
		return nil // the default database: the default chain goes on
	}
	if defaultTx || (tg.lazy != nil && tg.lazy.onDefault()) {
		return fmt.Errorf("%w: table %q is sharded but the transaction is on the default database (begin it with Sharding.On or ForUser)", ErrCrossShard, tg.t.Name)
	}
	if s.fol != nil {
		rt, err := s.leased(stmt.Context, tg.pl.rt)
		if err != nil {
			return fmt.Errorf("sharding: %s on %q: %w", op, tg.t.Name, err)
		}
		tg.pl.rt = rt
	}
	at.tg = tg
	tg.done, tg.pairsPut = at.done, at.n > 0
	if tg.lazy != nil && tg.tx == nil && pinned != nil {
		tg.tx = pinned // a hint binds the transaction to its shard
	}
	if pinned != nil {
		if tg.tx != nil && pinned != tg.tx {
			return fmt.Errorf("%w: hint %q in a transaction on %q", ErrCrossShard, pinned.name, tg.tx.name)
		}
		tg.mask, tg.bounded, tg.reason, tg.pinned = 1<<pinned.index, true, "hint", true
		if op == opCreate && !tg.raw {
			if err := s.prepareRows(db, tg, true); err != nil {
				return err
			}
		}
		return s.execute(db, tg)
	}
	if !tg.write && tg.tx == nil && tg.lazy == nil && len(tg.pl.rt.lag) > 0 {
		s.allowLag(stmt, tg)
	}
	if op == opCreate && !tg.raw {
		if err := s.prepareRows(db, tg, false); err != nil {
			return err
		}
	} else if err := s.analyze(db, tg); err != nil {
		return err
	}
	switch {
	case tg.tx != nil:
		if !tg.bounded || tg.mask&^(1<<tg.tx.index) != 0 {
			return fmt.Errorf("%w: %s on %q reaches shards %v, the transaction is on %q", ErrCrossShard, op, tg.t.Name, s.names(tg.mask, tg.bounded), tg.tx.name)
		}
		tg.mask = 1 << tg.tx.index
	case tg.lazy != nil:
		// A transaction begun on the default database that has not run
		// anything yet (or CreateInBatches' own): it binds to the shard of
		// the rows, and lives on that one shard.
		switch n := bits.OnesCount64(tg.mask); {
		case !tg.bounded || (n > 1 && !tg.many):
			return fmt.Errorf("%w: %s on %q reaches shards %v in one transaction begun on the default database (a transaction lives on one shard: split it per user, or use Sharding.ForUser)", ErrCrossShard, op, tg.t.Name, s.names(tg.mask, tg.bounded))
		case n == 1:
			tg.tx = s.shards[tg.singleShard()]
		}
	}
	if tg.write && !tg.bounded {
		return fmt.Errorf("%w: %s on %q", ErrNoShardKey, op, tg.t.Name)
	}
	scatter := !tg.bounded
	if scatter {
		// Every shard that owns a bucket or a hot user: not a shard a
		// move is filling, nor one added for a move.
		tg.mask = tg.pl.rt.owning
		tg.lagMask = 0
		tg.pl.lag = nil
		tg.reason = "scatter"
	}
	s.ownedOnly(tg, scatter)
	return s.execute(db, tg)
}

func (s *Sharding) allMask() uint64 {
	if len(s.shards) == 64 {
		return ^uint64(0)
	}
	return 1<<len(s.shards) - 1
}

func (s *Sharding) names(mask uint64, bounded bool) []string {
	if !bounded {
		mask = s.allMask()
	}
	var out []string
	for m := mask; m != 0; m &= m - 1 {
		out = append(out, s.shards[bits.TrailingZeros64(m)].name)
	}
	return out
}

// matcher returns the column matcher of table t; pkIsID says the schema's
// primary key is t's ID column (clause.PrimaryKey then names it).
func (t *tableInfo) matcher(pkIsID bool) columnMatcher {
	return func(ident string) int {
		if ident == clause.PrimaryKey {
			if pkIsID {
				return colID
			}
			return 0
		}
		if strings.HasSuffix(ident, "."+clause.PrimaryKey) {
			if pkIsID {
				return colID
			}
			return 0
		}
		col, qual := ident, ""
		if i := strings.LastIndexByte(ident, '.'); i >= 0 {
			col, qual = ident[i+1:], ident[:i]
			if j := strings.LastIndexByte(qual, '.'); j >= 0 {
				qual = qual[j+1:]
			}
			if qual != t.name && qual != clause.CurrentTable {
				return 0
			}
		}
		switch {
		case col == t.key:
			return colKey
		case t.id != "" && col == t.id:
			return colID
		}
		return 0
	}
}

// analyze computes the shards of a Query/Row/Update/Delete/Raw statement.
func (s *Sharding) analyze(db *gorm.DB, tg *target) error {
	stmt := db.Statement
	t := tg.t
	c, whereExprs, match := whereCond(db, tg)
	tg.cond = c

	// Resolve the order IDs named anywhere in the condition in one go.
	ids := collectIDs(c, nil)
	tg.ids = ids
	var shardOfID map[int64]int
	if len(ids) > 0 {
		var err error
		if err := s.verifyUncounted(db, tg, ids); err != nil {
			return err
		}
		shardOfID, err = s.resolveIDs(stmt.Context, tg.pl, ids)
		if err != nil && len(shardOfID) < len(ids) {
			return fmt.Errorf("sharding: resolve order IDs of %q: %w", t.Name, err)
		}
		tg.idShard = shardOfID
		tg.reason = "id"
		if s.cfg.Lookup != nil {
			for _, id := range ids {
				if !IsMinted(id) {
					tg.reason = "lookup"
					break
				}
			}
		}
	}
	tg.mask, tg.bounded = s.eval(tg.pl, c, shardOfID)
	if tg.reason == "" {
		tg.reason = "key"
	}
	if tg.bounded && bits.OnesCount64(tg.mask) > 1 {
		if tg.raw {
			s.planRawSplit(tg, c, stmt.SQL.String(), stmt.Vars, shardOfID)
		} else {
			s.planSplit(tg, whereExprs, match, shardOfID)
		}
	}
	// Set operations, CTEs, joins, subqueries: every part must pin the
	// shard the statement goes to (whole.go).
	return s.wholeStatement(db, tg)
}

// whereCond reads the condition of a Query/Row/Update/Delete/Raw
// statement as routing sees it: the WHERE (GORM's or the raw text's) and
// the primary keys GORM adds from the statement's struct.
func whereCond(db *gorm.DB, tg *target) (c *cond, whereExprs []clause.Expression, match columnMatcher) {
	stmt := db.Statement
	t := tg.t
	pkIsID := false
	var pk reflectField
	if stmt.Schema != nil && stmt.Schema.PrioritizedPrimaryField != nil && t.id != "" &&
		strings.EqualFold(stmt.Schema.PrioritizedPrimaryField.DBName, t.id) {
		pkIsID = true
		pk = stmt.Schema.PrioritizedPrimaryField
	}
	match = t.matcher(pkIsID)

	if tg.raw {
		c = rawWhere(stmt.SQL.String(), stmt.Vars, match)
	} else {
		c = otherCond
		if w, ok := stmt.Clauses["WHERE"].Expression.(clause.Where); ok {
			whereExprs = w.Exprs
			c = exprCond(w, match)
		}
		if pk != nil {
			if ids := implicitIDs(db, tg.op, pk); len(ids) > 0 {
				c = joinCond(opAnd, &cond{op: opAnd, kids: []*cond{c}}, &cond{op: opLeaf, column: colID, values: ids})
			}
		}
	}
	return c, whereExprs, match
}

type reflectField = *schemaField

// collectIDs appends the values of every ID leaf.
func collectIDs(c *cond, out []int64) []int64 {
	switch c.op {
	case opLeaf:
		if c.column == colID {
			out = append(out, c.values...)
		}
	case opAnd, opOr:
		for _, k := range c.kids {
			out = collectIDs(k, out)
		}
	}
	return out
}

// eval returns the shards a condition can match; bounded is false when
// it can match rows on any shard.
func (s *Sharding) eval(pl placer, c *cond, shardOfID map[int64]int) (mask uint64, bounded bool) {
	switch c.op {
	case opLeaf:
		for _, v := range c.values {
			if c.column == colKey {
				mask |= 1 << pl.key(v)
				continue
			}
			i, ok := shardOfID[v]
			if !ok {
				return 0, false
			}
			mask |= 1 << i
		}
		return mask, true
	case opAnd:
		for _, k := range c.kids {
			m, b := s.eval(pl, k, shardOfID)
			if !b {
				continue
			}
			if bounded {
				mask &= m
			} else {
				mask, bounded = m, true
			}
		}
		return mask, bounded
	case opOr:
		for _, k := range c.kids {
			m, b := s.eval(pl, k, shardOfID)
			if !b {
				return 0, false
			}
			mask |= m
		}
		return mask, true
	}
	return 0, false
}

// planSplit finds a top-level AND member that is an IN list on the key or
// ID and splits its values per shard, so each shard gets only its own.
func (s *Sharding) planSplit(tg *target, exprs []clause.Expression, match columnMatcher, shardOfID map[int64]int) {
	for _, e := range exprs {
		if or, ok := e.(clause.OrConditions); ok && len(or.Exprs) == 1 {
			return // OR at the top: no member constrains every row
		}
	}
	for i, e := range exprs {
		c := exprCond(e, match)
		if c.op != opLeaf || len(c.values) < 2 {
			continue
		}
		parts := make(map[int][]any)
		for _, v := range c.values {
			var si int
			if c.column == colKey {
				si = tg.pl.key(v)
			} else {
				var ok bool
				if si, ok = shardOfID[v]; !ok {
					return
				}
			}
			parts[si] = append(parts[si], v)
		}
		tg.split, tg.splitParts = i, parts
		tg.splitCol = tg.t.Key
		if c.column == colID {
			tg.splitCol = tg.t.ID
		}
		tg.reason = "split"
		return
	}
}

// implicitIDs returns the primary keys GORM will add to the WHERE from the
// statement's struct (First(&Order{ID: 5}), Model(&o).Update, Delete(&o)).
func implicitIDs(db *gorm.DB, op opKind, pk *schemaField) []int64 {
	stmt := db.Statement
	var rv reflect.Value
	switch op {
	case opQuery, opRow:
		rv = stmt.ReflectValue
	case opUpdate, opDelete:
		if stmt.Model == nil {
			return nil
		}
		rv = reflect.Indirect(reflect.ValueOf(stmt.Model))
	default:
		return nil
	}
	if !rv.IsValid() || stmt.Schema == nil {
		return nil
	}
	var out []int64
	add := func(v reflect.Value) {
		v = reflect.Indirect(v)
		if v.Kind() != reflect.Struct || v.Type() != stmt.Schema.ModelType {
			return
		}
		if x, zero := pk.ValueOf(stmt.Context, v); !zero {
			if n, ok := intValue(x); ok {
				out = append(out, n)
			}
		}
	}
	switch rv.Kind() {
	case reflect.Struct:
		add(rv)
	case reflect.Slice, reflect.Array:
		if op == opDelete {
			for i := 0; i < rv.Len(); i++ {
				add(rv.Index(i))
			}
		}
	}
	return out
}
