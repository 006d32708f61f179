package sharding

import (
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// BenchmarkScatterOrderLimit measures a scatter ORDER BY ... LIMIT 10
// merged over four shards (1024 rows each) against the same query on one
// database holding all 4096 rows; "offset-1000" shows the cost of depth
// (each shard returns offset+limit rows); "count" a scatter Count, which
// reads every row. "4-shards-map" follows a shared map (an in-memory
// store holding none, so Config's map): every shard's statement carries
// the ownership predicate ("user_id" % 1024 BETWEEN a AND b), true for
// every row since each shard holds the users of its own buckets only.
func BenchmarkScatterOrderLimit(b *testing.B) {
	pg := testcluster.PostgresFor(b)
	var dsns []string
	all := pg.PrimaryDSN(pg.CreateDatabase(b))
	allDB, _ := gorm.Open(postgres.Open(all), benchConfig(false))
	if err := allDB.AutoMigrate(&benchOrder{}); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		name := pg.CreateDatabase(b)
		dsns = append(dsns, pg.PrimaryDSN(name))
		db, _ := gorm.Open(postgres.Open(dsns[i]), benchConfig(false))
		if err := db.AutoMigrate(&benchOrder{}); err != nil {
			b.Fatal(err)
		}
		var rows []benchOrder
		for u := int64(0); u < 1024; u++ {
			// Users of shard i's buckets (EvenBuckets: 256i..256i+255).
			user := int64(i)*256 + u%256 + 1024*(u/256)
			rows = append(rows, benchOrder{ID: int64(i)*1024 + u + 1, UserID: user, Status: "s"})
		}
		db.CreateInBatches(rows, 512)
		allDB.CreateInBatches(rows, 512)
		if s, err := db.DB(); err == nil {
			s.Close()
		}
	}
	_, sharded, _ := benchDBs(b, dsns, false)
	_, withMap, ms := benchDBsWith(b, dsns, false, func(c *Config) {
		c.Map, c.Logger = &fakeStore{}, quietLogger()
	})
	b.Cleanup(func() { ms.Close() })
	for _, db := range []struct {
		name string
		db   *gorm.DB
	}{{"one-db", allDB}, {"4-shards", sharded}, {"4-shards-map", withMap}} {
		for _, off := range []int{0, 1000} {
			name := "order-id-desc-limit-10/" + db.name
			if off > 0 {
				name = "order-id-desc-offset-1000-limit-10/" + db.name
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					var out []benchOrder
					if err := db.db.Order("id desc").Offset(off).Limit(10).Find(&out).Error; err != nil {
						b.Fatal(err)
					}
					if len(out) != 10 || out[0].ID != int64(4096-off) {
						b.Fatalf("got %d rows, first %d", len(out), out[0].ID)
					}
				}
			})
		}
		b.Run("count/"+db.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var n int64
				if err := db.db.Model(&benchOrder{}).Where("status = ?", "s").Count(&n).Error; err != nil {
					b.Fatal(err)
				}
				if n != 4096 {
					b.Fatalf("count %d", n)
				}
			}
		})
	}
}
