package testcluster_test

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
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
	// upserts is the measured loop of both transaction cases.
	upserts := func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			if err := upsertTx(ctx, db, i%1000); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("tx-upsert", upserts)
	// The same transaction while 8 other connections run it as fast as
	// they can on other rows: the machine saturated by the server and its
	// clients, as in the resharding demo.
	b.Run("tx-upsert-loaded", func(b *testing.B) {
		load, err := sql.Open("pgx", pg.PrimaryDSN(""))
		if err != nil {
			b.Fatal(err)
		}
		defer load.Close()
		lctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var loaded atomic.Int64 // the load's committed transactions
		for w := range 8 {
			wg.Go(func() {
				for i := 0; lctx.Err() == nil; i++ {
					if upsertTx(lctx, load, 1000+w*1000+i%1000) == nil {
						loaded.Add(1)
					}
				}
			})
		}
		upserts(b)
		stop()
		wg.Wait()
		// Reported so that a load that failed (and so did not load the
		// machine) shows.
		b.ReportMetric(float64(loaded.Load())/b.Elapsed().Seconds(), "load-tx/s")
	})
}

// upsertTx writes row id in a transaction of its own.
func upsertTx(ctx context.Context, db *sql.DB, id int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO roundtrip VALUES ($1, 'x') ON CONFLICT (id) DO UPDATE SET v = excluded.v`, id); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}
