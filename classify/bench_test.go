package classify

import "testing"

// Typical GORM queries: a preload join with placeholders.
const (
	benchPostgres = `SELECT "users"."id","users"."created_at","users"."name","Company"."id" AS "Company__id","Company"."name" AS "Company__name" FROM "users" LEFT JOIN "companies" "Company" ON "users"."company_id" = "Company"."id" AND "Company"."deleted_at" IS NULL WHERE "users"."name" = $1 AND "users"."deleted_at" IS NULL ORDER BY "users"."id" LIMIT $2`
	benchMySQL    = "SELECT `users`.`id`,`users`.`created_at`,`users`.`name`,`Company`.`id` AS `Company__id`,`Company`.`name` AS `Company__name` FROM `users` LEFT JOIN `companies` `Company` ON `users`.`company_id` = `Company`.`id` AND `Company`.`deleted_at` IS NULL WHERE `users`.`name` = ? AND `users`.`deleted_at` IS NULL ORDER BY `users`.`id` LIMIT ?"
)

func checkedClassifyBench(b *testing.B, d Dialect, sql string, cacheSize int) {
	c := New(Config{Dialect: d, CacheSize: cacheSize})
	if r := c.Classify(sql); r.Kind != Read || len(r.Reads) != 2 {
		b.Fatalf("unexpected result %+v", r)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Classify(sql)
	}
}

func BenchmarkClassifyPostgresCached(b *testing.B) {
	checkedClassifyBench(b, Postgres, benchPostgres, 0)
}

func BenchmarkClassifyPostgresUncached(b *testing.B) {
	checkedClassifyBench(b, Postgres, benchPostgres, -1)
}

func BenchmarkClassifyMySQLCached(b *testing.B) { checkedClassifyBench(b, MySQL, benchMySQL, 0) }

func BenchmarkClassifyMySQLUncached(b *testing.B) { checkedClassifyBench(b, MySQL, benchMySQL, -1) }

func BenchmarkClassifyPostgresCachedParallel(b *testing.B) {
	c := New(Config{Dialect: Postgres})
	if r := c.Classify(benchPostgres); r.Kind != Read {
		b.Fatalf("unexpected result %+v", r)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Classify(benchPostgres)
		}
	})
}
