package testcluster_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// BenchmarkPostgresRoundTrip measures what one statement and one small
// transaction cost on the provider's PostgreSQL primary, from this
// process, one connection, the machine otherwise as it is: the unit of
// the resharding demo's copy and catch-up, which are chains of such
// round trips. Run it with each provider to compare them:
//
//	FRESHREAD_DOCKER=1 go test -run '^$' -bench PostgresRoundTrip ./internal/harness/testcluster/
//	FRESHREAD_DOCKER=0 go test -run '^$' -bench PostgresRoundTrip ./internal/harness/testcluster/
func BenchmarkPostgresRoundTrip(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	pg, err := testcluster.StartPostgres(ctx, 0)
	cancel()
	if err != nil {
		if testcluster.Required() {
			b.Fatal(err)
		}
		b.Skip(err)
	}
	b.Cleanup(func() { pg.Close() })
	db, err := sql.Open("pgx", pg.PrimaryDSN(""))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	ctx = context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS roundtrip (id int PRIMARY KEY, v text)`); err != nil {
		b.Fatal(err)
	}
	b.Run("select", func(b *testing.B) {
		for b.Loop() {
			var one int
			if err := db.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tx-upsert", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO roundtrip VALUES ($1, 'x') ON CONFLICT (id) DO UPDATE SET v = excluded.v`, i%1000); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
