package sharding

import (
	"context"
	"fmt"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/plugin"
)

type benchOrder struct {
	ID     int64 `gorm:"primaryKey;autoIncrement:false"`
	UserID int64 `gorm:"index"`
	Status string
}

func (benchOrder) TableName() string { return "orders" }

func benchConfig(dryRun bool) *gorm.Config {
	return &gorm.Config{Logger: logger.Discard, DryRun: dryRun, DisableAutomaticPing: true}
}

// benchDBs returns a plain *gorm.DB and one with the sharding plugin over
// four shards. dsn "" builds them in DryRun mode (no server).
func benchDBs(b *testing.B, dsns []string, dryRun bool) (plain, sharded *gorm.DB, s *Sharding) {
	b.Helper()
	return benchDBsWith(b, dsns, dryRun, nil)
}

// benchDBsWith is benchDBs with a change to the plugin's configuration.
func benchDBsWith(b *testing.B, dsns []string, dryRun bool, mod func(*Config)) (plain, sharded *gorm.DB, s *Sharding) {
	b.Helper()
	open := func(dsn string) *gorm.DB {
		if dsn == "" {
			dsn = "host=127.0.0.1 user=x dbname=x sslmode=disable"
		}
		db, err := gorm.Open(postgres.New(postgres.Config{DSN: dsn}), benchConfig(dryRun))
		if err != nil {
			b.Fatal(err)
		}
		return db
	}
	plain = open(dsns[0])
	cfg := Config{
		Tables:    []Table{{Name: "orders", Key: "user_id", ID: "id"}},
		Algorithm: EvenBuckets(1024, "s0", "s1", "s2", "s3"),
	}
	for i := 0; i < 4; i++ {
		cfg.Shards = append(cfg.Shards, ShardConfig{Name: []string{"s0", "s1", "s2", "s3"}[i], DB: open(dsns[i])})
	}
	g, _ := NewIDGenerator(context.Background(), IDConfig{Worker: 3})
	cfg.IDs = g
	if mod != nil {
		mod(&cfg)
	}
	sharded = open(dsns[0])
	s = New(cfg)
	if err := sharded.Use(s); err != nil {
		b.Fatal(err)
	}
	return plain, sharded, s
}

// BenchmarkRoutingDryRun measures the router alone: the statements are
// built but not sent (gorm DryRun), so the difference between plain and
// sharded is the cost of routing a statement to its shard.
func BenchmarkRoutingDryRun(b *testing.B) {
	plain, sharded, s := benchDBs(b, []string{"", "", "", ""}, true)
	// sharded-map: following a shared map (an in-memory store that does
	// not change), so every statement also checks the map's lease.
	_, withMap, ms := benchDBsWith(b, []string{"", "", "", ""}, true, func(c *Config) {
		c.Map, c.Logger = &fakeStore{}, quietLogger()
	})
	b.Cleanup(func() { ms.Close() })
	id, _ := s.NewID(77)
	for _, db := range []struct {
		name string
		db   *gorm.DB
	}{{"plain", plain}, {"sharded", sharded}, {"sharded-map", withMap}} {
		b.Run("find-by-user/"+db.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var out []benchOrder
				db.db.Where("user_id = ?", int64(i)).Find(&out)
			}
		})
		b.Run("first-by-id/"+db.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var out benchOrder
				db.db.First(&out, id)
			}
		})
		b.Run("in-4-shards/"+db.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var out []benchOrder
				db.db.Where("user_id IN ?", []int64{1, 300, 600, 900}).Find(&out)
			}
		})
	}
}

// BenchmarkScatterDryRun measures a scatter read over four shards built
// but not sent (gorm DryRun): with a fixed map, and following a shared
// map (an in-memory store), where each shard's statement also gets its
// ownership predicate: the CPU cost of the predicate alone.
func BenchmarkScatterDryRun(b *testing.B) {
	_, sharded, _ := benchDBs(b, []string{"", "", "", ""}, true)
	_, withMap, ms := benchDBsWith(b, []string{"", "", "", ""}, true, func(c *Config) {
		c.Map, c.Logger = &fakeStore{}, quietLogger()
	})
	b.Cleanup(func() { ms.Close() })
	for _, db := range []struct {
		name string
		db   *gorm.DB
	}{{"sharded", sharded}, {"sharded-map", withMap}} {
		b.Run("find-by-status/"+db.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var out []benchOrder
				if err := db.db.Where("status = ?", "s").Find(&out).Error; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRoutingPostgres runs the same statements against a real server:
// plain GORM on one database against the plugin over four databases of the
// same server.
func BenchmarkRoutingPostgres(b *testing.B) {
	pg := testcluster.PostgresFor(b)
	var dsns []string
	for i := 0; i < 4; i++ {
		name := pg.CreateDatabase(b)
		dsns = append(dsns, pg.PrimaryDSN(name))
		db, _ := gorm.Open(postgres.Open(dsns[i]), benchConfig(false))
		if err := db.AutoMigrate(&benchOrder{}); err != nil {
			b.Fatal(err)
		}
		for u := int64(0); u < 1024; u++ {
			db.Create(&benchOrder{ID: u + 1, UserID: u, Status: "s"})
		}
		if s, err := db.DB(); err == nil {
			s.Close()
		}
	}
	plain, sharded, _ := benchDBs(b, dsns, false)
	for _, db := range []struct {
		name string
		db   *gorm.DB
	}{{"plain", plain}, {"sharded", sharded}} {
		b.Run("find-by-user/"+db.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var out []benchOrder
				if err := db.db.Where("user_id = ?", int64(i%1024)).Find(&out).Error; err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("in-4-shards/"+db.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var out []benchOrder
				if err := db.db.Where("user_id IN ?", []int64{1, 300, 600, 900}).Find(&out).Error; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMapSnapshot measures what the shared map adds to a statement's
// routing: taking the snapshot and placing a key (fixed), and with
// Config.Map the lease check as well (map).
func BenchmarkMapSnapshot(b *testing.B) {
	_, _, fixed := benchDBs(b, []string{"", "", "", ""}, true)
	_, _, followed := benchDBsWith(b, []string{"", "", "", ""}, true, func(c *Config) {
		c.Map, c.Logger = &fakeStore{}, quietLogger()
	})
	b.Cleanup(func() { followed.Close() })
	ctx := context.Background()
	b.Run("fixed", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for i := 0; i < b.N; i++ {
			n += placer{rt: fixed.rt.Load()}.key(int64(i))
		}
		_ = n
	})
	b.Run("map", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for i := 0; i < b.N; i++ {
			rt, err := followed.leased(ctx, followed.rt.Load())
			if err != nil {
				b.Fatal(err)
			}
			n += placer{rt: rt}.key(int64(i))
		}
		_ = n
	})
}

// BenchmarkMultiShardWriteMariaDB measures a write over two MariaDB shards
// (databases of one server, each with its freshread plugin over the
// replica): an Update of two users' rows, one on each shard, outside any
// transaction, and for comparison an Update of one user's row.
func BenchmarkMultiShardWriteMariaDB(b *testing.B) {
	m := testcluster.MariaDBFor(b)
	names := []string{"m0", "m1"}
	var shards []ShardConfig
	for _, n := range names {
		db := m.CreateDatabase(b)
		d, err := gorm.Open(mysql.Open(m.PrimaryDSN(db)), benchConfig(false))
		if err != nil {
			b.Fatal(err)
		}
		if err := d.AutoMigrate(&benchOrder{}); err != nil {
			b.Fatal(err)
		}
		if s, err := d.DB(); err == nil {
			s.Close()
		}
		shards = append(shards, ShardConfig{
			Name:      n,
			Dialector: mysql.Open(m.PrimaryDSN(db)),
			Replicas:  []plugin.Replica{{Name: "r0", Dialector: mysql.Open(m.ReplicaDSN(db))}},
		})
	}
	def, err := gorm.Open(mysql.Open(m.PrimaryDSN(m.CreateDatabase(b))), benchConfig(false))
	if err != nil {
		b.Fatal(err)
	}
	s := New(Config{
		Tables:    []Table{{Name: "orders", Key: "user_id", ID: "id"}},
		Shards:    shards,
		Algorithm: EvenBuckets(1024, names...),
	})
	if err := def.Use(s); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	var a, c int64 = 1, 0
	for u := int64(2); c == 0; u++ {
		if s.ShardOf(u) != s.ShardOf(a) {
			c = u
		}
	}
	if err := def.Create([]*benchOrder{{ID: 1, UserID: a, Status: "s"}, {ID: 2, UserID: c, Status: "s"}}).Error; err != nil {
		b.Fatal(err)
	}
	for _, w := range []struct {
		name  string
		users []int64
	}{{"two-shards", []int64{a, c}}, {"one-shard", []int64{a}}} {
		b.Run(w.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := def.Model(&benchOrder{}).Where("user_id IN ?", w.users).Update("status", fmt.Sprint(i)).Error; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
