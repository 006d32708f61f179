package integration_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/sharding"
)

// Scatter reads under a shared map return only the rows each shard owns
// (docs/design/sharding-and-moves.md, "The shared bucket map"): rows of a bucket that are
// also on a shard that does not own it (a move's partial copy on its
// target, or the source's leftover after the switch) are read once, in
// the owner's version.

// ownEnv is four shards and s4 following map version 1 (buckets 5 and 6
// on s1, bucket 7 on s4, user 4242 hot on s3), the orders on their
// owners, copies of some of them on shards that do not own them (status
// "copy", amount + 1000: a wrong pick is visible), and a reference
// database holding the owners' rows only.
type ownEnv struct {
	*mergeEnv
	store  *sharding.SQLMapStore
	copies map[string][]ShOrder // shard -> the copies written there
}

func newOwnEnv(t *testing.T) *ownEnv {
	t.Helper()
	ctx := context.Background()
	store := newMapStore(t, nil)
	e := openShEnvSpec(t, shEnvSpec{extra: []string{"s4"}}, withMap(t, store, "own", time.Hour, 2*time.Hour),
		func(c *sharding.Config) { c.DeepOffset = 1 })
	m := e.s.Map()
	m.Owners[5], m.Owners[6], m.Owners[7] = "s1", "s1", "s4"
	m.HotUsers = map[int64]string{4242: "s3"} // bucket 146: s0's
	if _, err := store.Publish(ctx, 0, m); err != nil {
		t.Fatal(err)
	}
	if err := e.s.RefreshMap(ctx); err != nil || e.s.MapVersion() != 1 {
		t.Fatalf("version %d, %v", e.s.MapVersion(), err)
	}
	// User 5 first and the hot user last: the smallest and the largest
	// IDs have copies.
	users := []int64{5, 1029, 6, 7, 1031, 8, 146, 300, 301, 600, 601, 900, 901, 1023, 2058, 3000, 77, 4242}
	statuses := []string{"new", "paid", "shipped"}
	var rows []ShOrder
	id := int64(1)
	for i, u := range users {
		for k := 0; k < 6+i%7; k++ {
			rows = append(rows, ShOrder{ID: id, UserID: u, Status: statuses[(i+k)%3], Amount: int((u*7 + int64(k)*13) % 50)})
			id++
		}
	}
	if err := e.db.Create(&rows).Error; err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{5: "s1", 1029: "s1", 6: "s1", 7: "s4", 1031: "s4", 4242: "s3", 146: "s0", 300: "s1"}
	for u, sh := range want {
		if got := e.s.ShardOf(u); got != sh {
			t.Fatalf("user %d on %s, want %s", u, got, sh)
		}
	}
	// The copies: the source's leftovers of buckets 5 and 7 and of the hot
	// user on s0; a partial copy of bucket 300 (s1's) on s2, as a move
	// copying it there would leave.
	oe := &ownEnv{store: store, copies: map[string][]ShOrder{}}
	half := 0
	for _, o := range rows {
		to := ""
		switch {
		case o.UserID%1024 == 5 || o.UserID%1024 == 7 || o.UserID == 4242:
			to = "s0"
		case o.UserID%1024 == 300:
			if half++; half%2 == 1 {
				to = "s2"
			}
		}
		if to == "" {
			continue
		}
		c := o
		c.Status, c.Amount = "copy", o.Amount+1000
		oe.copies[to] = append(oe.copies[to], c)
	}
	for sh, cs := range oe.copies {
		if err := e.direct[sh].Create(&cs).Error; err != nil {
			t.Fatal(err)
		}
	}
	if len(oe.copies["s0"]) < 20 || len(oe.copies["s2"]) < 3 {
		t.Fatalf("copies %d on s0, %d on s2", len(oe.copies["s0"]), len(oe.copies["s2"]))
	}
	e.waitCaughtUp() // the replicas hold the copies too
	name := e.pg.CreateDatabase(t)
	ref, err := gorm.Open(postgres.Open(e.pg.PrimaryDSN(name)), quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDB(ref) })
	if err := ref.AutoMigrate(&ShOrder{}); err != nil {
		t.Fatal(err)
	}
	if err := ref.Create(&rows).Error; err != nil {
		t.Fatal(err)
	}
	oe.mergeEnv = &mergeEnv{shEnv: e, ref: ref, rows: rows}
	return oe
}

// sorted runs q into a fresh slice on both sides, sorts both with less
// and compares them.
func sortedSame[T any](t *testing.T, e *ownEnv, what string, q func(db *gorm.DB, dest *[]T) error, less func(a, b T) int) []T {
	t.Helper()
	var got, want []T
	if err := q(e.db, &got); err != nil {
		t.Fatalf("%s: sharded: %v", what, err)
	}
	if err := q(e.ref, &want); err != nil {
		t.Fatalf("%s: reference: %v", what, err)
	}
	slices.SortFunc(got, less)
	slices.SortFunc(want, less)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n sharded   %s\n reference %s", what, short(&got), short(&want))
	}
	return got
}

func byOrderID(a, b ShOrder) int { return int(a.ID - b.ID) }

// Every kind of scatter read returns every row once, in the owner's
// version: concatenated, merged (ORDER BY/LIMIT, Count, aggregates, GROUP
// BY/HAVING, DISTINCT, count(DISTINCT), First/Last/Take, Pluck, Rows), the
// two-phase deep OFFSET, an OR with a keyless side, order IDs nothing
// places, an OR over keys of two shards. A hot user's rows come from its
// hot shard. Keyed reads are unaffected; a hint reads the shard whole.
func TestShardingScatterOwnRows(t *testing.T) {
	e := newOwnEnv(t)
	n := len(e.rows)

	// Concatenation.
	got := sortedSame(t, e, "find, concatenated", func(db *gorm.DB, d *[]ShOrder) error {
		return db.Where("amount >= ?", 0).Find(d).Error
	}, byOrderID)
	if len(got) != n {
		t.Fatalf("%d rows, want %d", len(got), n)
	}
	sortedSame(t, e, "find without a condition", func(db *gorm.DB, d *[]ShOrder) error { return db.Find(d).Error }, byOrderID)
	var hot int
	for _, o := range got {
		if o.UserID == 4242 {
			hot++
		}
	}
	if hot == 0 {
		t.Fatal("no row of the hot user")
	}
	// Merged.
	e.same(t, "order by id", newOrders, func(db *gorm.DB, d any) error { return db.Order("id").Find(d).Error })
	e.same(t, "order by amount desc, id limit 7", newOrders, func(db *gorm.DB, d any) error {
		return db.Order("amount desc, id").Limit(7).Find(d).Error
	})
	e.same(t, "order by user_id, id offset 3 limit 9 (plain merge)", newOrders, func(db *gorm.DB, d any) error {
		return db.Order("user_id, id").Offset(3).Limit(9).Find(d).Error
	})
	for _, q := range []struct {
		name string
		f    func(*gorm.DB) *gorm.DB
	}{
		{"count", func(db *gorm.DB) *gorm.DB { return db.Model(&ShOrder{}) }},
		{"count of copies", func(db *gorm.DB) *gorm.DB { return db.Model(&ShOrder{}).Where("status = ?", "copy") }},
		{"count distinct amount", func(db *gorm.DB) *gorm.DB { return db.Model(&ShOrder{}).Distinct("amount") }},
		{"count of one hot user, by an OR", func(db *gorm.DB) *gorm.DB {
			return db.Model(&ShOrder{}).Where("user_id = ?", 4242).Or("amount > ?", 2000)
		}},
	} {
		e.same(t, q.name, func() any { return new(int64) }, func(db *gorm.DB, d any) error { return q.f(db).Count(d.(*int64)).Error })
	}
	type aggs struct {
		N, Total, Lo, Hi int64
		Avg              float64
		Amounts          int64
	}
	e.same(t, "aggregates", func() any { return &aggs{} }, func(db *gorm.DB, d any) error {
		return db.Model(&ShOrder{}).Select("count(*) AS n, sum(amount) AS total, min(amount) AS lo, max(amount) AS hi, avg(amount) AS avg, count(DISTINCT amount) AS amounts").Scan(d).Error
	})
	type group struct {
		Status string
		Total  int64
		N      int64
	}
	sortedSame(t, e, "group by status", func(db *gorm.DB, d *[]group) error {
		return db.Model(&ShOrder{}).Select("status, sum(amount) AS total, count(*) AS n").Group("status").Scan(d).Error
	}, func(a, b group) int { return strings.Compare(a.Status, b.Status) })
	type perUser struct {
		UserID  int64
		Total   int64
		Amounts int64
	}
	e.same(t, "group by user having", func() any { return &[]perUser{} }, func(db *gorm.DB, d any) error {
		return db.Model(&ShOrder{}).Select("user_id, sum(amount) AS total, count(DISTINCT amount) AS amounts").
			Group("user_id").Having("sum(amount) > ?", 100).Order("user_id").Scan(d).Error
	})
	sortedSame(t, e, "distinct", func(db *gorm.DB, d *[]string) error {
		return db.Model(&ShOrder{}).Distinct("status").Pluck("status", d).Error
	}, strings.Compare)
	e.same(t, "pluck", func() any { return &[]int{} }, func(db *gorm.DB, d any) error {
		return db.Model(&ShOrder{}).Order("id").Pluck("amount", d).Error
	})
	for _, f := range []struct {
		name string
		f    func(db *gorm.DB, d any) *gorm.DB
	}{
		{"first", func(db *gorm.DB, d any) *gorm.DB { return db.First(d) }},
		{"last", func(db *gorm.DB, d any) *gorm.DB { return db.Last(d) }},
		{"first by an order ID nothing places", func(db *gorm.DB, d any) *gorm.DB { return db.First(d, 2) }},
		{"first where amount", func(db *gorm.DB, d any) *gorm.DB { return db.Where("amount >= ?", 0).First(d) }},
	} {
		e.same(t, f.name, func() any { return &ShOrder{} }, func(db *gorm.DB, d any) error { return f.f(db, d).Error })
	}
	var taken ShOrder
	if err := e.db.Where("user_id % 1024 = ?", 5).Take(&taken).Error; err != nil || taken.Status == "copy" {
		t.Fatalf("take: %+v, %v", taken, err)
	}
	// Order IDs nothing places (no lookup, not minted): scattered.
	var ids []int64
	for _, c := range e.copies["s0"][:5] {
		ids = append(ids, c.ID)
	}
	sortedSame(t, e, "order IDs", func(db *gorm.DB, d *[]ShOrder) error { return db.Where("id IN ?", ids).Find(d).Error }, byOrderID)
	// An OR with a keyless side; an OR over keys of s1 and s0 (which has
	// user 5's leftovers).
	sortedSame(t, e, "or with a keyless side", func(db *gorm.DB, d *[]ShOrder) error {
		return db.Where("user_id = ?", 5).Or("amount > ?", 40).Find(d).Error
	}, byOrderID)
	if got := sortedSame(t, e, "or over keys of two shards", func(db *gorm.DB, d *[]ShOrder) error {
		return db.Where("user_id = ? OR user_id = ?", 5, 8).Find(d).Error
	}, byOrderID); len(got) == 0 {
		t.Fatal("no row")
	}
	// Rows().
	rows, err := e.db.Model(&ShOrder{}).Where("amount >= ?", 0).Order("id").Rows()
	if err != nil {
		t.Fatal(err)
	}
	var streamed []ShOrder
	for rows.Next() {
		var o ShOrder
		if err := e.db.ScanRows(rows, &o); err != nil {
			t.Fatal(err)
		}
		streamed = append(streamed, o)
	}
	rows.Close()
	var all []ShOrder
	e.ref.Order("id").Find(&all)
	if !reflect.DeepEqual(streamed, all) {
		t.Fatalf("Rows: %d rows, want %d (%s)", len(streamed), len(all), short(&streamed))
	}

	// Deep OFFSET (DeepOffset 1): the two-phase method, every phase
	// restricted to the shard's own rows.
	e.resetCounts()
	for _, ob := range []string{"id", "id desc", "user_id desc, id", "amount, id"} {
		for _, o := range []int{20, 41, 60, 97, n - 6, n + 3} {
			e.same(t, fmt.Sprintf("order %s offset %d limit 5", ob, o), newOrders, func(db *gorm.DB, d any) error {
				return db.Order(ob).Offset(o).Limit(5).Find(d).Error
			})
		}
	}
	if c := e.countsSnapshot(); c["s0"] <= 4*6 {
		t.Fatalf("statements per shard %v: the two-phase method did not run", c)
	}

	// Keyed reads: the owner, unchanged; a hint reads the shard whole.
	for _, u := range []int64{5, 4242, 300, 8} {
		sortedSame(t, e, fmt.Sprintf("user %d", u), func(db *gorm.DB, d *[]ShOrder) error {
			return db.Where("user_id = ?", u).Find(d).Error
		}, byOrderID)
	}
	var onS0 []ShOrder
	if err := e.db.Clauses(sharding.Shard("s0")).Where("status = ?", "copy").Find(&onS0).Error; err != nil || len(onS0) != len(e.copies["s0"]) {
		t.Fatalf("hint s0: %d copies, want %d (%v)", len(onS0), len(e.copies["s0"]), err)
	}
	var cnt int64
	if err := e.s.On(e.db, "s2").Model(&ShOrder{}).Where("status = ?", "copy").Count(&cnt).Error; err != nil || int(cnt) != len(e.copies["s2"]) {
		t.Fatalf("On(s2): %d copies, want %d (%v)", cnt, len(e.copies["s2"]), err)
	}
}

// A raw SQL read over several shards is refused while a move is pending
// in the process's snapshot (here copying bucket 300 to s2), and runs when
// the move is done; keyed raw reads and raw IN lists split per shard run
// during the move.
func TestShardingScatterOwnRaw(t *testing.T) {
	ctx := context.Background()
	e := newOwnEnv(t)
	raw := func(db *gorm.DB) ([]ShOrder, error) {
		var out []ShOrder
		err := db.Raw("SELECT * FROM orders WHERE amount >= $1", 0).Scan(&out).Error
		return out, err
	}
	// No move pending: raw SQL reads every owning shard whole (the copies
	// left here are what the mover's protocol rules out).
	got, err := raw(e.db)
	if err != nil || len(got) != len(e.rows)+len(e.copies["s0"])+len(e.copies["s2"]) {
		t.Fatalf("raw scatter, no move: %d rows, %v", len(got), err)
	}
	mv := sharding.MoveStatus{ID: "m300", Buckets: []int{300}, From: "s1", To: "s2", Phase: sharding.MoveCopying}
	if err := e.store.SaveMove(ctx, mv, sharding.NotCaughtUp); err != nil {
		t.Fatal(err)
	}
	if err := e.s.RefreshMap(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = raw(e.db)
	if !errors.Is(err, sharding.ErrScatterUnsupported) || !strings.Contains(err.Error(), "may be on two shards") {
		t.Fatalf("raw scatter during a move: %v, want ErrScatterUnsupported", err)
	}
	t.Logf("refused: %v", err)
	var n int64
	if err := e.db.Raw("SELECT count(*) FROM orders WHERE user_id = $1", 300).Scan(&n).Error; err != nil || n == 0 {
		t.Fatalf("keyed raw read during the move: %d, %v", n, err)
	}
	var split []ShOrder
	if err := e.db.Raw("SELECT * FROM orders WHERE user_id IN ($1, $2) AND amount >= $3", 300, 8, 0).Scan(&split).Error; err != nil {
		t.Fatalf("split raw read during the move: %v", err)
	}
	var want []ShOrder
	e.ref.Where("user_id IN ?", []int64{300, 8}).Find(&want)
	slices.SortFunc(split, byOrderID)
	if !reflect.DeepEqual(split, want) {
		t.Fatalf("split raw read: %s, want %s", short(&split), short(&want))
	}
	// The GORM API reads each shard's own rows meanwhile.
	var viaGorm []ShOrder
	if err := e.db.Where("amount >= ?", 0).Find(&viaGorm).Error; err != nil || len(viaGorm) != len(e.rows) {
		t.Fatalf("GORM scatter during the move: %d rows, %v", len(viaGorm), err)
	}

	// The cleanup deletes the copies, then the move is done.
	for sh, cs := range e.copies {
		var ids []int64
		for _, c := range cs {
			ids = append(ids, c.ID)
		}
		if err := e.direct[sh].Where("id IN ? AND status = ?", ids, "copy").Delete(&ShOrder{}).Error; err != nil {
			t.Fatal(err)
		}
	}
	e.waitCaughtUp()
	mv.Phase = sharding.MoveDone
	if err := e.store.SaveMove(ctx, mv, sharding.NotCaughtUp); err != nil {
		t.Fatal(err)
	}
	if err := e.s.RefreshMap(ctx); err != nil {
		t.Fatal(err)
	}
	got, err = raw(e.db)
	if err != nil {
		t.Fatalf("raw scatter after the move: %v", err)
	}
	sort.Slice(got, func(i, j int) bool { return got[i].ID < got[j].ID })
	var all []ShOrder
	e.ref.Order("id").Find(&all)
	if !reflect.DeepEqual(got, all) {
		t.Fatalf("raw scatter after the move: %d rows, want %d", len(got), len(all))
	}
}

// Every key, on every shard: with a row of each key 0..2047 and of each
// hot user on all five shards (status: the shard's name), a scatter read
// returns each key once, from the shard the key is routed to, whatever
// the shape of the shard's ownership (ranges with single buckets at both
// ends, a shard owning one bucket, hot users inside and outside their
// shard's buckets).
func TestShardingScatterOwnEveryKey(t *testing.T) {
	ctx := context.Background()
	store := newMapStore(t, nil)
	e := openShEnvSpec(t, shEnvSpec{extra: []string{"s4"}}, withMap(t, store, "every", time.Hour, 2*time.Hour))
	m := e.s.Map()
	m.Owners[0], m.Owners[1023], m.Owners[255] = "s1", "s0", "s4"
	m.Owners[256], m.Owners[600] = "s0", "s4"
	m.HotUsers = map[int64]string{10: "s3", 2000: "s2", 1500: "s1", 700: "s4", 1279: "s0"}
	if _, err := store.Publish(ctx, 0, m); err != nil {
		t.Fatal(err)
	}
	if err := e.s.RefreshMap(ctx); err != nil || e.s.MapVersion() != 1 {
		t.Fatalf("version %d, %v", e.s.MapVersion(), err)
	}
	keys := map[int64]bool{}
	for k := int64(0); k < 2048; k++ {
		keys[k] = true
	}
	for u := range m.HotUsers {
		keys[u] = true
	}
	for i, sh := range e.names {
		var rows []ShOrder
		for k := range keys {
			rows = append(rows, ShOrder{ID: int64(i)*100000 + k, UserID: k, Status: sh})
		}
		if err := e.direct[sh].CreateInBatches(rows, 500).Error; err != nil {
			t.Fatal(err)
		}
	}
	e.waitCaughtUp()
	var got []ShOrder
	if err := e.db.Where("amount >= ?", 0).Find(&got).Error; err != nil {
		t.Fatal(err)
	}
	seen := map[int64]string{}
	for _, o := range got {
		if prev, ok := seen[o.UserID]; ok {
			t.Fatalf("key %d read from %s and %s", o.UserID, prev, o.Status)
		}
		seen[o.UserID] = o.Status
		if want := e.s.ShardOf(o.UserID); o.Status != want {
			t.Errorf("key %d read from %s, routed to %s", o.UserID, o.Status, want)
		}
	}
	if len(seen) != len(keys) {
		t.Fatalf("%d keys read, want %d", len(seen), len(keys))
	}
	var n int64
	if err := e.db.Model(&ShOrder{}).Count(&n).Error; err != nil || n != int64(len(keys)) {
		t.Fatalf("count %d, want %d (%v)", n, len(keys), err)
	}
}
