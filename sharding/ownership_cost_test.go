package sharding

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// TestOwnPredicateCost (FRESHREAD_OWN_MEASURE=1) logs what the ownership
// predicate costs on the server: EXPLAIN ANALYZE's execution time
// (median and minimum of 40) of a shard's count(*) and ORDER BY id DESC
// LIMIT 10, without the predicate, with it (the middle shard s1 of
// EvenBuckets(1024, s0..s3): NOT of two ranges) and with the direct range
// it replaces, on a shard of 1024 and of 100,000 rows of its own users.
// It fails if the predicate keeps the ORDER BY ... LIMIT from the primary
// key's index.
func TestOwnPredicateCost(t *testing.T) {
	if os.Getenv("FRESHREAD_OWN_MEASURE") == "" {
		t.Skip("set FRESHREAD_OWN_MEASURE=1")
	}
	pg := testcluster.PostgresFor(t)
	rt := ownRouting(t, movedMap(t, 0, 0, "s0"))
	own := &rt.own[1]
	render := func(q func(*gorm.DB) *gorm.DB) (string, []any) {
		db := dryDB(t)
		var out []benchOrder
		tx := q(db.Model(&benchOrder{})).Find(&out)
		return tx.Statement.SQL.String(), tx.Statement.Vars
	}
	pred := own.predicate(clause.Column{Table: clause.CurrentTable, Name: "user_id"}, 1024)
	direct := clause.Expr{SQL: `("orders"."user_id" % ? BETWEEN ? AND ?)`, Vars: []any{1024, 256, 511}}
	type query struct {
		name string
		sql  string
		vars []any
	}
	var qs []query
	for _, v := range []struct {
		name string
		e    clause.Expression
	}{{"none", nil}, {"predicate", pred}, {"direct range (not used)", direct}} {
		where := func(db *gorm.DB) *gorm.DB {
			if v.e != nil {
				return db.Where(v.e)
			}
			return db
		}
		sql, vars := render(func(db *gorm.DB) *gorm.DB { return where(db.Where("status = ?", "s")).Select("count(*)") })
		qs = append(qs, query{"count, " + v.name, sql, vars})
		sql, vars = render(func(db *gorm.DB) *gorm.DB { return where(db).Order("id desc").Limit(10) })
		qs = append(qs, query{"order by id desc limit 10, " + v.name, sql, vars})
	}
	for _, n := range []int{1024, 100000} {
		db, err := gorm.Open(postgres.Open(pg.PrimaryDSN(pg.CreateDatabase(t))), benchConfig(false))
		if err != nil {
			t.Fatal(err)
		}
		if err := db.AutoMigrate(&benchOrder{}); err != nil {
			t.Fatal(err)
		}
		// s1's users: buckets 256..511.
		if err := db.Exec(fmt.Sprintf(`INSERT INTO orders SELECT g, 256 + g %% 256 + 1024 * (g / 256), 's' FROM generate_series(1, %d) g`, n)).Error; err != nil {
			t.Fatal(err)
		}
		db.Exec("ANALYZE orders")
		for _, q := range qs {
			var times []float64
			var plan []string
			for i := 0; i < 40; i++ {
				plan = nil
				if err := db.Raw("EXPLAIN (ANALYZE, SUMMARY ON) "+q.sql, q.vars...).Scan(&plan).Error; err != nil {
					t.Fatal(err)
				}
				var ms float64
				fmt.Sscanf(strings.TrimSpace(plan[len(plan)-1]), "Execution Time: %f ms", &ms)
				times = append(times, ms)
			}
			sort.Float64s(times)
			nodes := strings.Join(plan[:len(plan)-2], " | ")
			t.Logf("%6d rows, %-45s median %7.3f ms, min %7.3f ms: %s", n, q.name, times[len(times)/2], times[0], nodes)
			if strings.HasPrefix(q.name, "order by id desc limit 10, predicate") && !strings.Contains(nodes, "Index Scan Backward using orders_pkey") {
				t.Errorf("%d rows: the predicate made ORDER BY id LIMIT 10 leave the index: %s", n, nodes)
			}
		}
	}
}
