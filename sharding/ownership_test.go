package sharding

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// ownMap is Config's map (EvenBuckets(1024, s0..s3)) with buckets 5 and 6
// moved to s1, bucket 7 to s4, hot user 4242 (bucket 146, owned by s0) on
// s3, hot user 5000 (bucket 904, s3's) on s0 and hot user 300 (bucket
// 300, s1's) on s1.
func ownMap(t *testing.T) BucketMap {
	t.Helper()
	m := movedMap(t, 5, 6, "s1")
	m.Owners[7] = "s4"
	m.HotUsers = map[int64]string{4242: "s3", 5000: "s0", 300: "s1"}
	return m
}

func ownRouting(t *testing.T, m BucketMap) *routing {
	t.Helper()
	byName := map[string]*shard{}
	for i, n := range mapTestShards {
		byName[n] = &shard{name: n, index: i}
	}
	rt, err := newRouting(m, 1024, byName)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// What each shard owns: its buckets as ranges, the other shards' hot
// users in them, its hot users elsewhere; and, for every key, exactly
// one shard owns it: the shard the key is routed to.
func TestOwnershipOf(t *testing.T) {
	rt := ownRouting(t, ownMap(t))
	want := []shardOwn{
		{spans: []bucketSpan{{0, 4}, {8, 255}}, exclude: []int64{4242}, include: []int64{5000}},
		{spans: []bucketSpan{{5, 6}, {256, 511}}},
		{spans: []bucketSpan{{512, 767}}},
		{spans: []bucketSpan{{768, 1023}}, exclude: []int64{5000}, include: []int64{4242}},
		{spans: []bucketSpan{{7, 7}}},
	}
	for i := range want {
		got := rt.own[i]
		if !slices.Equal(got.spans, want[i].spans) || !slices.Equal(got.exclude, want[i].exclude) || !slices.Equal(got.include, want[i].include) {
			t.Errorf("shard %s owns %+v, want %+v", mapTestShards[i], got, want[i])
		}
	}
	checkOwners := func(label string, pl placer, own []shardOwn) {
		t.Helper()
		keys := []int64{4242, 5000, 300, 1<<62 + 5, 1<<63 - 1}
		for k := int64(0); k < 3*1024; k++ {
			keys = append(keys, k)
		}
		for _, k := range keys {
			var owners []int
			for i := range own {
				if own[i].owns(k, 1024) {
					owners = append(owners, i)
				}
			}
			if len(owners) != 1 || owners[0] != pl.key(k) {
				t.Fatalf("%s: key %d owned by %v, routed to %d", label, k, owners, pl.key(k))
			}
		}
	}
	checkOwners("snapshot", placer{rt: rt}, rt.own)

	// A read that accepts a lag reads buckets 5 and 6 on s4: they are s4's
	// for it.
	pl := placer{rt: rt, lag: map[int]int{5: 4, 6: 4}}
	tg := &target{pl: pl, bounded: true, mask: 1<<0 | 1<<4, split: -1}
	s := &Sharding{fol: &follower{}}
	s.ownedOnly(tg, false)
	if !tg.own || tg.ownLag == nil {
		t.Fatal("a bounded read over two shards without a split gets no predicate")
	}
	if got := tg.ownLag[4].spans; !slices.Equal(got, []bucketSpan{{5, 7}}) {
		t.Errorf("s4 with the lag owns %v, want 5-7", got)
	}
	checkOwners("lag", pl, tg.ownLag)

	// Config's map: each of s0..s3 owns a range; none everything.
	rt0 := ownRouting(t, movedMap(t, 0, 0, "s0"))
	for i := 0; i < 4; i++ {
		if rt0.own[i].everything(1024) || len(rt0.own[i].spans) != 1 {
			t.Errorf("shard %d: %+v", i, rt0.own[i])
		}
	}
	// One shard owning every bucket: no predicate, unless another shard
	// has hot users.
	one := BucketMap{Owners: make([]string, 1024)}
	for b := range one.Owners {
		one.Owners[b] = "s2"
	}
	if rt1 := ownRouting(t, one); !rt1.own[2].everything(1024) || rt1.own[2].predicate(clause.Column{Name: "user_id"}, 1024) != nil {
		t.Errorf("s2 owning every bucket: %+v", rt1.own[2])
	}
	one.HotUsers = map[int64]string{77: "s3"}
	if rt1 := ownRouting(t, one); rt1.own[2].everything(1024) || !slices.Equal(rt1.own[2].exclude, []int64{77}) {
		t.Errorf("s2 owning every bucket, user 77 hot on s3: %+v", rt1.own[2])
	}
}

// renderPred renders a predicate as PostgreSQL gets it.
func renderPred(t *testing.T, e clause.Expression) (string, []any) {
	t.Helper()
	db := dryDB(t)
	var out []map[string]any
	tx := db.Table("orders").Where(e).Find(&out)
	if tx.Error != nil {
		t.Fatal(tx.Error)
	}
	sql := tx.Statement.SQL.String()
	const pre = `SELECT * FROM "orders" WHERE `
	if !strings.HasPrefix(sql, pre) {
		t.Fatalf("sql %q", sql)
	}
	return strings.TrimPrefix(sql, pre), tx.Statement.Vars
}

func TestOwnPredicateSQL(t *testing.T) {
	rt := ownRouting(t, ownMap(t))
	col := clause.Column{Table: clause.CurrentTable, Name: "user_id"}
	for _, tc := range []struct {
		shard int
		sql   string
		vars  []any
	}{
		{0, `((NOT ("orders"."user_id" % $1 BETWEEN $2 AND $3 OR "orders"."user_id" % $4 BETWEEN $5 AND $6) AND "orders"."user_id" NOT IN ($7)) OR "orders"."user_id" IN ($8))`,
			[]any{1024, 5, 7, 1024, 256, 1023, int64(4242), int64(5000)}},
		{1, `(NOT ("orders"."user_id" % $1 BETWEEN $2 AND $3 OR "orders"."user_id" % $4 BETWEEN $5 AND $6 OR "orders"."user_id" % $7 BETWEEN $8 AND $9))`,
			[]any{1024, 0, 4, 1024, 7, 255, 1024, 512, 1023}},
		{2, `(NOT ("orders"."user_id" % $1 BETWEEN $2 AND $3 OR "orders"."user_id" % $4 BETWEEN $5 AND $6))`, []any{1024, 0, 511, 1024, 768, 1023}},
		{4, `(NOT ("orders"."user_id" % $1 BETWEEN $2 AND $3 OR "orders"."user_id" % $4 BETWEEN $5 AND $6))`, []any{1024, 0, 6, 1024, 8, 1023}},
	} {
		sql, vars := renderPred(t, rt.own[tc.shard].predicate(col, 1024))
		if sql != tc.sql || !reflect.DeepEqual(vars, tc.vars) {
			t.Errorf("shard %d:\n got  %s %v\n want %s %v", tc.shard, sql, vars, tc.sql, tc.vars)
		}
	}
	// Only hot users; every bucket but another shard's hot users.
	hotOnly := shardOwn{include: []int64{9, 11}}
	if sql, vars := renderPred(t, hotOnly.predicate(col, 1024)); sql != `("orders"."user_id" IN ($1,$2))` || len(vars) != 2 {
		t.Errorf("hot users only: %s %v", sql, vars)
	}
	allBut := shardOwn{spans: []bucketSpan{{0, 1023}}, exclude: []int64{77}}
	if sql, _ := renderPred(t, allBut.predicate(col, 1024)); sql != `("orders"."user_id" NOT IN ($1))` {
		t.Errorf("every bucket but hot user 77: %s", sql)
	}
	if sql, _ := renderPred(t, (&shardOwn{}).predicate(col, 1024)); sql != `(FALSE)` {
		t.Errorf("nothing: %s", sql)
	}
	// Single buckets of other shards: "= ?".
	edges := shardOwn{spans: []bucketSpan{{1, 1022}}}
	if sql, vars := renderPred(t, edges.predicate(col, 1024)); sql != `(NOT ("orders"."user_id" % $1 = $2 OR "orders"."user_id" % $3 = $4))` || !reflect.DeepEqual(vars, []any{1024, 0, 1024, 1023}) {
		t.Errorf("buckets 1-1022: %s %v", sql, vars)
	}
}

// ownTest is a DryRun plugin (mapTest) recording the SQL each shard gets.
type ownTest struct {
	*mapTest
	mu  sync.Mutex
	sql map[string][]string
}

func newOwnTest(t *testing.T, store *fakeStore) *ownTest {
	t.Helper()
	var mod func(*Config)
	if store != nil {
		mod = func(c *Config) { c.MapRefresh, c.MapLease = time.Hour, 2*time.Hour }
	}
	ot := &ownTest{mapTest: newMapTest(t, store, mod), sql: map[string][]string{}}
	for _, name := range mapTestShards {
		d, _ := ot.s.ShardDB(name)
		name := name
		rec := func(db *gorm.DB) {
			ot.mu.Lock()
			ot.sql[name] = append(ot.sql[name], db.Statement.SQL.String())
			ot.mu.Unlock()
		}
		cb := d.Callback()
		for _, err := range []error{
			cb.Query().After("gorm:query").Register("test:sql", rec),
			cb.Raw().After("gorm:raw").Register("test:sql", rec),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if store != nil {
		if err := ot.s.RefreshMap(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return ot
}

// run runs q and returns the SQL per shard.
func (ot *ownTest) run(q func(db *gorm.DB) error) (map[string][]string, error) {
	ot.mu.Lock()
	ot.sql = map[string][]string{}
	ot.mu.Unlock()
	err := q(ot.db)
	ot.mu.Lock()
	defer ot.mu.Unlock()
	return ot.sql, err
}

func hasPred(sql string) bool { return strings.Contains(sql, `"orders"."user_id" % $`) }

// With a shared map, the per-shard statements of a scatter read (no key,
// an OR with a keyless side, an order ID nothing places, an OR over keys
// of two shards) carry each shard's predicate; keyed reads, split IN
// lists, hints and a fixed map (no Config.Map) do not.
func TestScatterOwnPredicate(t *testing.T) {
	store := &fakeStore{}
	m := ownMap(t)
	m.Version = 1
	store.set(m, true)
	ot := newOwnTest(t, store)
	if ot.s.MapVersion() != 1 {
		t.Fatalf("version %d", ot.s.MapVersion())
	}
	var out []benchOrder
	for _, tc := range []struct {
		name   string
		q      func(db *gorm.DB) error
		shards []string // reached, with the predicate
	}{
		{"no key", func(db *gorm.DB) error { return db.Where("status = ?", "x").Find(&out).Error }, []string{"s0", "s1", "s2", "s3", "s4"}},
		{"no condition", func(db *gorm.DB) error { return db.Find(&out).Error }, []string{"s0", "s1", "s2", "s3", "s4"}},
		{"or with a keyless side", func(db *gorm.DB) error {
			return db.Where("user_id = ?", 5).Or("status = ?", "x").Find(&out).Error
		}, []string{"s0", "s1", "s2", "s3", "s4"}},
		{"unknown order id", func(db *gorm.DB) error { return db.Where("id = ?", 12345).Find(&out).Error }, []string{"s0", "s1", "s2", "s3", "s4"}},
		{"or over keys of two shards", func(db *gorm.DB) error {
			return db.Where("user_id = ? OR user_id = ?", 5, 8).Find(&out).Error
		}, []string{"s0", "s1"}},
	} {
		got, err := ot.run(tc.q)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var names []string
		for n, sqls := range got {
			names = append(names, n)
			if len(sqls) != 1 || !hasPred(sqls[0]) {
				t.Errorf("%s: shard %s ran %q, want one statement with the predicate", tc.name, n, sqls)
			}
			// The statement's own condition is kept whole, ANDed.
			if tc.name != "no condition" && !strings.Contains(sqls[0], ") AND (") {
				t.Errorf("%s: shard %s: %s", tc.name, n, sqls[0])
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, tc.shards) {
			t.Errorf("%s: ran on %v, want %v", tc.name, names, tc.shards)
		}
	}
	// The OR is kept in parentheses before the predicate.
	got, _ := ot.run(func(db *gorm.DB) error { return db.Where("user_id = ?", 5).Or("status = ?", "x").Find(&out).Error })
	if s := got["s2"][0]; !strings.Contains(s, `WHERE ((user_id = $1 OR status = $2)) AND ((NOT ("orders"."user_id" % $3 BETWEEN $4 AND $5 OR "orders"."user_id" % $6 BETWEEN $7 AND $8)))`) {
		t.Errorf("OR then predicate on s2: %s", s)
	}

	for _, tc := range []struct {
		name string
		q    func(db *gorm.DB) error
	}{
		{"keyed", func(db *gorm.DB) error { return db.Where("user_id = ?", 5).Find(&out).Error }},
		{"hot user", func(db *gorm.DB) error { return db.Where("user_id = ?", 4242).Find(&out).Error }},
		{"split IN", func(db *gorm.DB) error { return db.Where("user_id IN ?", []int64{1, 300, 600, 7}).Find(&out).Error }},
		{"hint", func(db *gorm.DB) error { return db.Clauses(Shard("s2")).Where("status = ?", "x").Find(&out).Error }},
		{"On", func(db *gorm.DB) error { return ot.s.On(db, "s3").Find(&out).Error }},
		{"ForUser", func(db *gorm.DB) error { return ot.s.ForUser(db, 5).Where("status = ?", "x").Find(&out).Error }},
	} {
		got, err := ot.run(tc.q)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(got) == 0 {
			t.Fatalf("%s ran nowhere", tc.name)
		}
		for n, sqls := range got {
			for _, s := range sqls {
				if hasPred(s) {
					t.Errorf("%s: shard %s ran %s, want no predicate", tc.name, n, s)
				}
			}
		}
	}

	// A fixed map: no predicate anywhere.
	fixed := newOwnTest(t, nil)
	got, err := fixed.run(func(db *gorm.DB) error { return db.Where("status = ?", "x").Find(&out).Error })
	if err != nil || len(got) != 4 {
		t.Fatalf("fixed map scatter: %v, %v", got, err)
	}
	for n, sqls := range got {
		if hasPred(sqls[0]) {
			t.Errorf("fixed map: shard %s ran %s", n, sqls[0])
		}
	}
}

// A raw SQL read over several shards is refused while a move is pending
// in the snapshot, and runs when there is none (or the move is done or
// rolled back); a raw read on one shard, or a raw IN list split per
// shard, runs during a move.
func TestRawScatterRefusedDuringMove(t *testing.T) {
	store := &fakeStore{}
	m := ownMap(t)
	m.Version = 1
	store.set(m, true)
	ot := newOwnTest(t, store)
	var out []benchOrder
	scatter := func() error { return ot.db.Raw("SELECT * FROM orders WHERE status = $1", "x").Find(&out).Error }
	orKeys := func() error {
		return ot.db.Raw("SELECT * FROM orders WHERE user_id = $1 OR user_id = $2", 5, 8).Find(&out).Error
	}
	if err := scatter(); err != nil {
		t.Fatalf("no move: %v", err)
	}
	for _, phase := range []string{MovePlanned, MoveCopying, MoveCatchingUp, MoveSwitching, MoveSwitched, MoveCleaning} {
		store.setMoves(MoveStatus{ID: "m1", Buckets: []int{300}, From: "s1", To: "s2", Phase: phase},
			MoveStatus{ID: "m0", Buckets: []int{9}, From: "s0", To: "s2", Phase: MoveDone})
		if err := ot.s.RefreshMap(context.Background()); err != nil {
			t.Fatal(err)
		}
		for name, q := range map[string]func() error{"scatter": scatter, "or over two shards": orKeys} {
			err := q()
			if !errors.Is(err, ErrScatterUnsupported) || !strings.Contains(err.Error(), "may be on two shards") || !strings.Contains(err.Error(), "version 1 has 1 bucket move in progress") {
				t.Fatalf("%s, move %s: %v, want ErrScatterUnsupported", name, phase, err)
			}
		}
		got, err := ot.run(func(db *gorm.DB) error {
			return db.Raw("SELECT * FROM orders WHERE user_id = $1", 300).Find(&out).Error
		})
		if err != nil || len(got) != 1 {
			t.Fatalf("keyed raw read during the move: %v, %v", got, err)
		}
		if _, err := ot.run(func(db *gorm.DB) error {
			return db.Raw("SELECT * FROM orders WHERE user_id IN ($1, $2) AND status = $3", 5, 600, "x").Find(&out).Error
		}); err != nil {
			t.Fatalf("split raw IN during the move: %v", err)
		}
		if err := ot.db.Clauses(Shard("s1")).Raw("SELECT * FROM orders").Find(&out).Error; err != nil {
			t.Fatalf("raw with a hint during the move: %v", err)
		}
	}
	for _, phase := range []string{MoveDone, MoveRolledBack} {
		store.setMoves(MoveStatus{ID: "m1", Buckets: []int{300}, From: "s1", To: "s2", Phase: phase})
		if err := ot.s.RefreshMap(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := scatter(); err != nil {
			t.Fatalf("move %s: %v", phase, err)
		}
	}
}
