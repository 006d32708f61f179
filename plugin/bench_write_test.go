package plugin_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// BenchmarkWrite measures one UPDATE through the plugin (with the memory
// store): plain GORM, native positions (the position read after COMMIT; on
// PostgreSQL in COMMIT's own round trip for transactions, commit_fold.go)
// and heartbeat positions (one extra write transaction), native positions
// published to Redis (the writer lease; writer tags), on PostgreSQL (also
// behind PgBouncer in transaction mode) and MariaDB, as an autocommit statement (SkipDefaultTransaction) and in
// GORM's default transaction. The difference is the cost of publishing.
func BenchmarkWrite(b *testing.B) {
	type target struct {
		name    string
		primary func(b *testing.B) (gorm.Dialector, gorm.Dialector)
	}
	targets := []target{
		{"postgres", func(b *testing.B) (gorm.Dialector, gorm.Dialector) {
			pg, name := benchDatabase(b)
			// With FRESHREAD_BENCH_RTT the primary is behind a relay too:
			// the round trips a write makes are then visible.
			return postgres.Open(viaRelay(b, pg.PrimaryDSN(name))), postgres.Open(pg.ReplicaDSN(0, name))
		}},
		{"postgres-pgbouncer", func(b *testing.B) (gorm.Dialector, gorm.Dialector) {
			// The primary and the replica behind PgBouncer in transaction
			// mode, pgx in simple_protocol.
			pg, name := benchDatabase(b)
			bn := testcluster.PgBouncerFor(b, pg, testcluster.PoolTransaction)
			return postgres.Open(testcluster.WithExecMode(bn.PrimaryDSN(name), "simple_protocol")),
				postgres.Open(testcluster.WithExecMode(bn.ReplicaDSN(0, name), "simple_protocol"))
		}},
		{"mariadb", func(b *testing.B) (gorm.Dialector, gorm.Dialector) {
			m := testcluster.MariaDBFor(b)
			name := m.CreateDatabase(b)
			return mysql.Open(m.PrimaryDSN(name)), mysql.Open(m.ReplicaDSN(name))
		}},
	}
	for _, tg := range targets {
		for _, mode := range []string{"plain", "native", "heartbeat", "redis"} {
			for _, write := range []string{"autocommit", "tx"} {
				b.Run(tg.name+"/"+mode+"/"+write, func(b *testing.B) {
					if err := benchWrite(b, mode, write == "tx", tg.primary); err != nil {
						b.Fatal(err)
					}
				})
			}
		}
	}
}

// benchWrite measures one write shape (BenchmarkWrite) and returns the
// first failure: of the setup, or of an update that did not change its
// row.
func benchWrite(b *testing.B, mode string, inTx bool, open func(b *testing.B) (gorm.Dialector, gorm.Dialector)) error {
	primary, replica := open(b)
	db, err := gorm.Open(primary, benchGormConfig())
	if err != nil {
		return err
	}
	defer closeGorm(db)
	if err := db.AutoMigrate(&benchItem{}); err != nil {
		return err
	}
	if err := db.Save(&benchItem{ID: 1, Name: "one", Version: 1}).Error; err != nil {
		return err
	}
	if mode != "plain" {
		cfg := plugin.Config{Store: lsnstore.NewMemory(), Replicas: []plugin.Replica{{Name: "r0", Dialector: replica}}}
		switch mode {
		case "heartbeat":
			cfg.Positions = plugin.Heartbeat
		case "redis":
			// Native positions in a shared store: the writer lease, and
			// on PostgreSQL the connections' writer tags.
			r := testcluster.RedisFor(b)
			rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
			defer rdb.Close()
			cfg.Store = lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: fmt.Sprintf("bw_%d", time.Now().UnixNano())})
		}
		p := plugin.New(cfg)
		if err := db.Use(p); err != nil {
			return err
		}
		defer p.Close()
	}
	w := db.Session(&gorm.Session{SkipDefaultTransaction: !inTx})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if res := w.Model(&benchItem{ID: 1}).Update("version", i); res.Error != nil || res.RowsAffected != 1 {
			return fmt.Errorf("update %d: %v, %d rows affected, want 1", i, res.Error, res.RowsAffected)
		}
	}
	return nil
}
