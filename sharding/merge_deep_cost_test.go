package sharding

import (
	"fmt"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// TestDeepOffsetCost (FRESHREAD_DEEP_MEASURE=1) logs the rows the router
// reads from the shards and the time of ORDER BY user_id, id LIMIT 10
// OFFSET o over four shards of 30,000 rows each, plain merge vs the
// two-phase method, and checks both against one database.
func TestDeepOffsetCost(t *testing.T) {
	if os.Getenv("FRESHREAD_DEEP_MEASURE") == "" {
		t.Skip("set FRESHREAD_DEEP_MEASURE=1")
	}
	const per = 30000
	pg := testcluster.PostgresFor(t)
	open := func(dsn string) *gorm.DB {
		db, err := gorm.Open(postgres.Open(dsn), benchConfig(false))
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	all := open(pg.PrimaryDSN(pg.CreateDatabase(t)))
	cfg := Config{Tables: []Table{{Name: "orders", Key: "user_id", ID: "id"}}, Algorithm: EvenBuckets(1024, "s0", "s1", "s2", "s3")}
	fill := `INSERT INTO orders (id, user_id, status) SELECT %d*%d + g, g %% 1000, 's' FROM generate_series(1, %d) g`
	if err := all.AutoMigrate(&benchOrder{}); err != nil {
		t.Fatal(err)
	}
	var dsn0 string
	for i := 0; i < 4; i++ {
		dsn := pg.PrimaryDSN(pg.CreateDatabase(t))
		if i == 0 {
			dsn0 = dsn
		}
		db := open(dsn)
		if err := db.AutoMigrate(&benchOrder{}); err != nil {
			t.Fatal(err)
		}
		for _, d := range []*gorm.DB{db, all} {
			if err := d.Exec(fmt.Sprintf(fill, i, per, per)).Error; err != nil {
				t.Fatal(err)
			}
			d.Exec("ANALYZE orders")
		}
		cfg.Shards = append(cfg.Shards, ShardConfig{Name: fmt.Sprintf("s%d", i), DB: db})
	}
	s := New(cfg)
	sharded := open(dsn0)
	if err := sharded.Use(s); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	read := map[string]int{}
	mergeRowsRead = func(sh string, n int) { mu.Lock(); read[sh] += n; mu.Unlock() }
	defer func() { mergeRowsRead = nil }()
	q := func(db *gorm.DB, off int) []benchOrder {
		var out []benchOrder
		if err := db.Order("user_id, id").Offset(off).Limit(10).Find(&out).Error; err != nil {
			t.Fatal(err)
		}
		return out
	}
	t.Logf("| offset | method | rows read (s0/s1/s2/s3) | total | time |")
	for _, off := range []int{0, 1000, 10000, 100000} {
		want := q(all, off)
		for _, m := range []struct {
			name string
			deep int
		}{{"plain", -1}, {"two-phase", 1}} { // 1: the method wherever it applies
			s.cfg.DeepOffset = m.deep
			const runs = 5
			read = map[string]int{}
			start := time.Now()
			for r := 0; r < runs; r++ {
				if got := q(sharded, off); !reflect.DeepEqual(got, want) {
					t.Fatalf("offset %d %s: got %v, want %v", off, m.name, got, want)
				}
			}
			el := time.Since(start) / runs
			tot := 0
			for _, v := range read {
				tot += v
			}
			t.Logf("| %d | %s | %d/%d/%d/%d | %d | %.1f ms |", off, m.name, read["s0"]/runs, read["s1"]/runs, read["s2"]/runs, read["s3"]/runs, tot/runs, float64(el.Microseconds())/1000)
		}
	}
}
