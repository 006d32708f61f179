package integration_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/sharding"
)

// mergeEnv is four shards holding 300 orders of 60 users, spread unevenly
// (user u has u%9+1 orders), and a reference database holding the same
// rows in one table: every merged scatter read must equal the same query
// on the reference.
type mergeEnv struct {
	*shEnv
	ref     *gorm.DB
	rows    []ShOrder
	textOK  bool // the servers collate text in byte order
	perShrd map[string][]ShOrder
}

func newMergeEnv(t *testing.T, opts ...shOpt) *mergeEnv {
	t.Helper()
	e := &mergeEnv{shEnv: newShEnv(t, append([]shOpt{withIDs(fixedIDs(t, 6))}, opts...)...)}
	statuses := []string{"new", "paid", "Shipped", "cancelled", "paid"}
	for u := int64(1); u <= 60; u++ {
		for k := int64(0); k <= u%9; k++ {
			e.rows = append(e.rows, ShOrder{UserID: u * 37, Status: statuses[(u+k)%5], Amount: int((u*13 + k*7) % 50)})
		}
	}
	if err := e.db.Create(&e.rows).Error; err != nil {
		t.Fatal(err)
	}
	name := e.pg.CreateDatabase(t)
	ref, err := gorm.Open(postgres.Open(e.pg.PrimaryDSN(name)), quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDB(ref) })
	if err := ref.AutoMigrate(&ShOrder{}); err != nil {
		t.Fatal(err)
	}
	if err := ref.CreateInBatches(e.rows, 100).Error; err != nil {
		t.Fatal(err)
	}
	e.ref = ref
	var coll string
	if err := ref.Raw("SELECT datcollate FROM pg_database WHERE datname = current_database()").Scan(&coll).Error; err != nil {
		t.Fatal(err)
	}
	e.textOK = coll == "C" || coll == "POSIX"
	e.perShrd = map[string][]ShOrder{}
	for _, o := range e.rows {
		sh := e.s.ShardOf(o.UserID)
		e.perShrd[sh] = append(e.perShrd[sh], o)
	}
	return e
}

// same runs q on the sharded database and on the reference, each into a
// fresh value made by mk, and compares them.
func (e *mergeEnv) same(t *testing.T, what string, mk func() any, q func(db *gorm.DB, dest any) error) any {
	t.Helper()
	got, want := mk(), mk()
	if err := q(e.db, got); err != nil {
		t.Fatalf("%s: sharded: %v", what, err)
	}
	if err := q(e.ref, want); err != nil {
		t.Fatalf("%s: reference: %v", what, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n sharded   %s\n reference %s", what, short(got), short(want))
	}
	return got
}

func short(v any) string {
	rv := reflect.Indirect(reflect.ValueOf(v))
	if !rv.IsValid() {
		return "nothing" // a write's answer, or a nil pointer
	}
	s := fmt.Sprintf("%+v", rv.Interface())
	if len(s) > 600 {
		s = s[:600] + "..."
	}
	return s
}

func newOrders() any { return &[]ShOrder{} }

func TestShardingMergeOrderBy(t *testing.T) {
	e := newMergeEnv(t)
	if len(e.perShrd) != 4 {
		t.Fatalf("rows on %d shards, want 4", len(e.perShrd))
	}
	e.resetCounts()
	// Several columns, DESC, a total order (id breaks the ties).
	e.same(t, "amount desc, id", newOrders, func(db *gorm.DB, d any) error { return db.Order("amount desc, id").Find(d).Error })
	if c := e.countsSnapshot(); len(c) != 4 || sum(c) != 4 {
		t.Fatalf("statements per shard %v, want one on each", c)
	}
	e.same(t, "clause.OrderBy", newOrders, func(db *gorm.DB, d any) error {
		return db.Order(clause.OrderBy{Columns: []clause.OrderByColumn{
			{Column: clause.Column{Name: "amount"}, Desc: true},
			{Column: clause.Column{Table: clause.CurrentTable, Name: "user_id"}},
			{Column: clause.Column{Name: "id"}, Desc: true},
		}}).Find(d).Error
	})
	e.same(t, "two Order calls", newOrders, func(db *gorm.DB, d any) error {
		return db.Where("amount < ?", 30).Order("user_id DESC").Order("id").Find(d).Error
	})
	// Ties without a total order: the key sequence matches and the rows
	// are the same set.
	var got, want []ShOrder
	if err := e.db.Order("amount").Find(&got).Error; err != nil {
		t.Fatal(err)
	}
	e.ref.Order("amount").Find(&want)
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Amount != want[i].Amount {
			t.Fatalf("row %d: amount %d, want %d", i, got[i].Amount, want[i].Amount)
		}
	}
	byID := func(s []ShOrder) { sort.Slice(s, func(i, j int) bool { return s[i].ID < s[j].ID }) }
	byID(got)
	byID(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatal("ORDER BY amount: not the same rows")
	}
	// Ties are broken by shard order, deterministically.
	var again []ShOrder
	e.db.Order("amount").Find(&again)
	var first []ShOrder
	e.db.Order("amount").Find(&first)
	if !reflect.DeepEqual(again, first) {
		t.Fatal("ties: two runs differ")
	}
	// A selected subset ordered by a column it lacks (hidden sort column).
	type idOnly struct{ ID int64 }
	e.same(t, "select id order by amount, id", func() any { return &[]idOnly{} }, func(db *gorm.DB, d any) error {
		return db.Model(&ShOrder{}).Select("id").Order("amount desc, id").Find(d).Error
	})
	// Maps.
	e.same(t, "maps", func() any { return &[]map[string]any{} }, func(db *gorm.DB, d any) error {
		return db.Model(&ShOrder{}).Order("id").Limit(7).Find(d).Error
	})
	// Pluck.
	e.same(t, "pluck", func() any { return &[]int64{} }, func(db *gorm.DB, d any) error {
		return db.Model(&ShOrder{}).Order("id desc").Limit(9).Pluck("id", d).Error
	})
	// Text order: correct when the servers collate in byte order, refused
	// otherwise (never a wrong order).
	err := e.db.Order("status, id").Find(&got).Error
	if e.textOK {
		e.same(t, "status, id", newOrders, func(db *gorm.DB, d any) error { return db.Order("status, id").Find(d).Error })
	} else if !errors.Is(err, sharding.ErrScatterUnsupported) {
		t.Fatalf("text order under a non-C collation: %v", err)
	}
	// Rows() and Scan stream the merged rows.
	rows, err := e.db.Model(&ShOrder{}).Order("id").Limit(3).Rows()
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var o ShOrder
		if err := e.db.ScanRows(rows, &o); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
	}
	rows.Close()
	var wantIDs []int64
	e.ref.Model(&ShOrder{}).Order("id").Limit(3).Pluck("id", &wantIDs)
	if !reflect.DeepEqual(ids, wantIDs) {
		t.Fatalf("Rows: %v, want %v", ids, wantIDs)
	}
}

// TestShardingMergeOrderByExpression: ORDER BY an expression is
// computed by every shard as a hidden column and merged on its values,
// with and without a select list, with LIMIT/OFFSET, DESC and NULLS.
func TestShardingMergeOrderByExpression(t *testing.T) {
	e := newMergeEnv(t)
	if got := e.same(t, "amount % 7, id", newOrders, func(db *gorm.DB, d any) error { return db.Order("amount % 7, id").Find(d).Error }); len(*got.(*[]ShOrder)) != len(e.rows) {
		t.Fatalf("ORDER BY amount %% 7: %d rows, want all %d", len(*got.(*[]ShOrder)), len(e.rows))
	}
	e.same(t, "amount * -1 desc, id desc with a page", newOrders, func(db *gorm.DB, d any) error {
		return db.Order("amount * -1 DESC, id DESC").Limit(7).Offset(5).Find(d).Error
	})
	e.same(t, "nullif nulls first", newOrders, func(db *gorm.DB, d any) error {
		return db.Order("nullif(amount % 3, 0) NULLS FIRST, id").Find(d).Error
	})
	type idAmount struct {
		ID     int64
		Amount int
	}
	e.same(t, "select list and an expression", func() any { return &[]idAmount{} }, func(db *gorm.DB, d any) error {
		return db.Model(&ShOrder{}).Select("id, amount").Order("abs(amount - 20), id").Limit(9).Find(d).Error
	})
	if e.textOK {
		e.same(t, "lower(status)", newOrders, func(db *gorm.DB, d any) error { return db.Order("lower(status), id").Find(d).Error })
	}
}

func TestShardingMergeLimitOffset(t *testing.T) {
	e := newMergeEnv(t)
	total := len(e.rows)
	for _, lo := range [][2]int{{10, 0}, {10, 5}, {1, 0}, {7, 50}, {25, 137}, {10, total - 4}, {10, total}, {10, total + 500}, {0, 3}, {total + 10, 0}} {
		l, o := lo[0], lo[1]
		e.resetCounts()
		got := e.same(t, fmt.Sprintf("limit %d offset %d", l, o), newOrders, func(db *gorm.DB, d any) error {
			return db.Order("amount desc").Order("id").Limit(l).Offset(o).Find(d).Error
		}).(*[]ShOrder)
		if want := max(0, min(l, total-o)); len(*got) != want {
			t.Fatalf("limit %d offset %d: %d rows, want %d", l, o, len(*got), want)
		}
	}
	// OFFSET without LIMIT.
	e.same(t, "offset 290", newOrders, func(db *gorm.DB, d any) error { return db.Order("id").Offset(290).Find(d).Error })
	// LIMIT without ORDER BY: any c rows, all distinct and real.
	var some []ShOrder
	if err := e.db.Limit(10).Find(&some).Error; err != nil || len(some) != 10 {
		t.Fatalf("limit without order: %d rows, %v", len(some), err)
	}
	seen := map[int64]bool{}
	for _, o := range some {
		if seen[o.ID] {
			t.Fatalf("row %d twice", o.ID)
		}
		seen[o.ID] = true
	}
	// First, Last, Take.
	newOrder := func() any { return &ShOrder{} }
	e.same(t, "First", newOrder, func(db *gorm.DB, d any) error { return db.First(d).Error })
	e.same(t, "Last", newOrder, func(db *gorm.DB, d any) error { return db.Last(d).Error })
	e.same(t, "First with a filter", newOrder, func(db *gorm.DB, d any) error { return db.Where("amount = ?", 17).First(d).Error })
	e.same(t, "Last ordered", newOrder, func(db *gorm.DB, d any) error { return db.Order("amount").Last(d).Error })
	var taken ShOrder
	if err := e.db.Where("amount > ?", 40).Take(&taken).Error; err != nil || taken.Amount <= 40 {
		t.Fatalf("Take: %+v %v", taken, err)
	}
	var none ShOrder
	if err := e.db.Where("status = ?", "nope").First(&none).Error; !errors.Is(err, gorm.ErrRecordNotFound) {
		t.Fatalf("First with no row: %v, want ErrRecordNotFound", err)
	}
}

type aggRow struct {
	N     int64
	Total int64
	Lo    int
	Hi    int
	Mean  float64
}

func TestShardingMergeAggregates(t *testing.T) {
	e := newMergeEnv(t)
	// Count.
	for _, where := range []string{"1 = 1", "amount > 20", "status = 'nope'"} {
		var got, want int64
		if err := e.db.Model(&ShOrder{}).Where(where).Count(&got).Error; err != nil {
			t.Fatal(err)
		}
		e.ref.Model(&ShOrder{}).Where(where).Count(&want)
		if got != want {
			t.Fatalf("Count(%s) = %d, want %d", where, got, want)
		}
	}
	// The shards are uneven, so the average of the shard averages is not
	// the average: the merge must not compute it that way.
	var sumAvg, trueSum float64
	for _, rows := range e.perShrd {
		s := 0
		for _, o := range rows {
			s += o.Amount
		}
		sumAvg += float64(s) / float64(len(rows))
		trueSum += float64(s)
	}
	trueAvg := trueSum / float64(len(e.rows))
	if math.Abs(sumAvg/float64(len(e.perShrd))-trueAvg) < 1e-6 {
		t.Fatal("test data: averaged averages equal the average; make the shards uneven")
	}
	const sel = "count(*) AS n, sum(amount) AS total, min(amount) AS lo, max(amount) AS hi, avg(amount) AS mean"
	for _, where := range []string{"1 = 1", "amount > 20", "status = 'nope'"} {
		var got, want aggRow
		if err := e.db.Model(&ShOrder{}).Select(sel).Where(where).Scan(&got).Error; err != nil {
			t.Fatal(err)
		}
		if err := e.ref.Model(&ShOrder{}).Select(sel).Where(where).Scan(&want).Error; err != nil {
			t.Fatal(err)
		}
		if got.N != want.N || got.Total != want.Total || got.Lo != want.Lo || got.Hi != want.Hi || math.Abs(got.Mean-want.Mean) > 1e-9 {
			t.Fatalf("aggregates (%s): %+v, want %+v", where, got, want)
		}
		if where == "1 = 1" && math.Abs(got.Mean-trueAvg) > 1e-9 {
			t.Fatalf("AVG %v, want %v", got.Mean, trueAvg)
		}
	}
	// Find into a slice, a scalar, a map.
	var rows []aggRow
	if err := e.db.Model(&ShOrder{}).Select(sel).Find(&rows).Error; err != nil || len(rows) != 1 || rows[0].N != int64(len(e.rows)) {
		t.Fatalf("Find aggregates: %+v %v", rows, err)
	}
	var total, wantTotal int64
	e.db.Model(&ShOrder{}).Select("sum(amount)").Scan(&total)
	e.ref.Model(&ShOrder{}).Select("sum(amount)").Scan(&wantTotal)
	if total != wantTotal || total == 0 {
		t.Fatalf("sum scalar %d, want %d", total, wantTotal)
	}
	var m map[string]any
	if err := e.db.Model(&ShOrder{}).Select("count(*) AS n, max(amount) AS hi").Take(&m).Error; err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(m["n"]) != fmt.Sprint(len(e.rows)) || m["hi"] == nil {
		t.Fatalf("map: %v", m)
	}
}

type groupRow struct {
	Bucket int
	N      int64
	Total  int64
	Lo     int
	Hi     int
	Mean   float64
}

func TestShardingMergeGroupBy(t *testing.T) {
	e := newMergeEnv(t)
	const sel = "amount % 4 AS bucket, count(*) AS n, sum(amount) AS total, min(amount) AS lo, max(amount) AS hi, avg(amount) AS mean"
	cmpGroups := func(what string, got, want []groupRow) {
		t.Helper()
		if len(got) != len(want) || len(got) == 0 {
			t.Fatalf("%s: %d groups, want %d", what, len(got), len(want))
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.Bucket != w.Bucket || g.N != w.N || g.Total != w.Total || g.Lo != w.Lo || g.Hi != w.Hi || math.Abs(g.Mean-w.Mean) > 1e-9 {
				t.Fatalf("%s: group %d: %+v, want %+v", what, i, g, w)
			}
		}
	}
	for _, q := range []struct {
		what string
		f    func(*gorm.DB) *gorm.DB
	}{
		{"order by bucket", func(db *gorm.DB) *gorm.DB { return db.Order("bucket") }},
		{"order by total desc", func(db *gorm.DB) *gorm.DB { return db.Order("total desc, bucket") }},
		{"order by mean, limit", func(db *gorm.DB) *gorm.DB { return db.Order("mean DESC").Limit(2).Offset(1) }},
		{"where, order by n", func(db *gorm.DB) *gorm.DB { return db.Where("amount > ?", 10).Order("n, bucket") }},
	} {
		var got, want []groupRow
		if err := q.f(e.db.Model(&ShOrder{}).Select(sel).Group("amount % 4")).Find(&got).Error; err != nil {
			t.Fatalf("%s: %v", q.what, err)
		}
		if err := q.f(e.ref.Model(&ShOrder{}).Select(sel).Group("amount % 4")).Find(&want).Error; err != nil {
			t.Fatalf("%s: reference: %v", q.what, err)
		}
		cmpGroups(q.what, got, want)
	}
	// Groups that span shards, without ORDER BY: the same set.
	type statusRow struct {
		Status string
		N      int64
		Total  int64
		Mean   float64
	}
	var got, want []statusRow
	if err := e.db.Model(&ShOrder{}).Select("status, count(*) AS n, sum(amount) AS total, avg(amount) AS mean").Group("status").Scan(&got).Error; err != nil {
		t.Fatal(err)
	}
	e.ref.Model(&ShOrder{}).Select("status, count(*) AS n, sum(amount) AS total, avg(amount) AS mean").Group("status").Scan(&want)
	key := func(s []statusRow) {
		sort.Slice(s, func(i, j int) bool { return s[i].Status < s[j].Status })
		for i := range s {
			s[i].Mean = math.Round(s[i].Mean*1e9) / 1e9
		}
	}
	key(got)
	key(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("group by status:\n %+v\n %+v", got, want)
	}
	// Count with GROUP BY counts the groups.
	var n, wantN int64
	if err := e.db.Model(&ShOrder{}).Group("status").Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	e.ref.Model(&ShOrder{}).Group("status").Count(&wantN)
	if n != wantN || n < 2 {
		t.Fatalf("count of groups %d, want %d", n, wantN)
	}
	// Group by a column that is selected, ordered by it.
	type userRow struct {
		UserID int64
		N      int64
	}
	e.same(t, "group by user_id", func() any { return &[]userRow{} }, func(db *gorm.DB, d any) error {
		return db.Model(&ShOrder{}).Select("user_id, count(*) AS n").Group("user_id").Order("n desc, user_id").Limit(10).Scan(d).Error
	})
}

func TestShardingMergeDistinct(t *testing.T) {
	e := newMergeEnv(t)
	e.same(t, "distinct amount ordered", func() any { return &[]int{} }, func(db *gorm.DB, d any) error {
		return db.Model(&ShOrder{}).Distinct("amount").Order("amount desc").Scan(d).Error
	})
	e.same(t, "distinct amount ordered, limit", func() any { return &[]int{} }, func(db *gorm.DB, d any) error {
		return db.Model(&ShOrder{}).Distinct("amount").Order("amount").Limit(5).Offset(3).Pluck("amount", d).Error
	})
	var got, want []string
	if err := e.db.Model(&ShOrder{}).Distinct("status").Pluck("status", &got).Error; err != nil {
		t.Fatal(err)
	}
	e.ref.Model(&ShOrder{}).Distinct("status").Pluck("status", &want)
	sort.Strings(got)
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("distinct status %v, want %v", got, want)
	}
}

// What the merge cannot do correctly is still refused, naming it.
func TestShardingMergeUnsupported(t *testing.T) {
	e := newMergeEnv(t)
	type any2 = []map[string]any
	for name, q := range map[string]func() error{
		"HAVING": func() error {
			var x any2
			return e.db.Model(&ShOrder{}).Select("status, sum(amount) AS t").Group("status").Having("sum(amount) % ? = 0", 10).Find(&x).Error
		},
		"DISTINCT": func() error {
			var x any2
			return e.db.Model(&ShOrder{}).Select("sum(distinct amount) AS n").Find(&x).Error
		},
		"window": func() error {
			var x any2
			return e.db.Model(&ShOrder{}).Select("id, row_number() over (order by id) AS r").Find(&x).Error
		},
		"a position": func() error { var x []ShOrder; return e.db.Order("2").Find(&x).Error },
		"inside an expression": func() error {
			var x any2
			return e.db.Model(&ShOrder{}).Select("sum(amount) / count(*) AS r").Find(&x).Error
		},
		"other than": func() error {
			var x any2
			return e.db.Model(&ShOrder{}).Select("string_agg(status, ',') AS s").Find(&x).Error
		},
		"count(DISTINCT ...) of several": func() error {
			var x any2
			return e.db.Model(&ShOrder{}).Select("count(DISTINCT (user_id, amount)) AS n").Find(&x).Error
		},
		"raw SQL with ORDER BY": func() error {
			var x []ShOrder
			return e.db.Raw("SELECT * FROM orders ORDER BY id").Find(&x).Error
		},
		"raw SQL with an aggregate": func() error {
			var n int64
			return e.db.Raw("SELECT count(*) FROM orders").Scan(&n).Error
		},
	} {
		err := q()
		if !errors.Is(err, sharding.ErrScatterUnsupported) {
			t.Fatalf("%s: err = %v, want ErrScatterUnsupported", name, err)
		}
		if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(name)) {
			t.Fatalf("%s: the error does not name it: %v", name, err)
		}
	}
	// Raw scatter without a merge still concatenates, also through Scan.
	var raw []ShOrder
	if err := e.db.Raw("SELECT * FROM orders WHERE amount > ?", 25).Scan(&raw).Error; err != nil {
		t.Fatal(err)
	}
	var want int64
	e.ref.Model(&ShOrder{}).Where("amount > ?", 25).Count(&want)
	if int64(len(raw)) != want {
		t.Fatalf("raw Scan: %d rows, want %d", len(raw), want)
	}
}
