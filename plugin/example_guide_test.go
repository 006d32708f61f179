package plugin_test

import (
	"context"
	"database/sql"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/freshreadprom"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// The examples below are the code of docs/guide: internal/doccheck fails
// when a guide's snippet is not the body of an example. They need servers,
// so they are compiled, not run.

// Why a read went to the primary: every routing decision, with its reason.
func Example_onDecision() {
	db, err := gorm.Open(postgres.Open("postgres://app@primary/shop"), &gorm.Config{})
	if err != nil {
		panic(err)
	}
	err = db.Use(plugin.New(plugin.Config{
		Replicas: []plugin.Replica{{Name: "r1", Dialector: postgres.Open("postgres://app@replica1/shop")}},
		OnDecision: func(ctx context.Context, d plugin.Decision) {
			if d.Target == plugin.Primary && d.Reason != plugin.ReasonWrite {
				slog.InfoContext(ctx, "read on the primary", "reason", d.Reason, "tables", d.Tables,
					"required", d.Required.String(), "best_replica", d.ReplicaPosition.String())
			}
		},
	}))
	if err != nil {
		panic(err)
	}
}

// The plugin's Prometheus metrics.
func Example_metrics() {
	db, err := gorm.Open(postgres.Open("postgres://app@primary/shop"), &gorm.Config{})
	if err != nil {
		panic(err)
	}
	p := plugin.New(plugin.Config{
		Replicas: []plugin.Replica{{Name: "r1", Dialector: postgres.Open("postgres://app@replica1/shop")}},
	})
	if err := db.Use(p); err != nil {
		panic(err)
	}
	prometheus.MustRegister(freshreadprom.Plugin(p))
	http.Handle("/metrics", promhttp.Handler())
}

// Read-your-writes and consistency levels per context.
func Example_sessions() {
	var db *gorm.DB                                 // with the plugin installed
	ctx := plugin.WithSession(context.Background()) // this caller's writes are seen by its reads
	db.WithContext(ctx).Exec("UPDATE users SET name = ? WHERE id = ?", "Ada", 7)
	var name string
	db.WithContext(ctx).Raw("SELECT name FROM users WHERE id = ?", 7).Scan(&name) // a replica only once it has replayed the UPDATE

	strong := plugin.WithConsistency(ctx, plugin.Strong) // this read: the primary, always
	db.WithContext(strong).Raw("SELECT balance FROM accounts WHERE id = ?", 7).Scan(new(int64))

	// Across HTTP requests, the session travels in a cookie or a header.
	http.ListenAndServe(":8080", plugin.Middleware(plugin.MiddlewareConfig{})(http.DefaultServeMux))
}

// A configuration for several processes with the tracker.
func Example_production() {
	db, err := gorm.Open(postgres.Open("postgres://app@primary/shop"), &gorm.Config{})
	if err != nil {
		panic(err)
	}
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"redis:6379"}, ContextTimeoutEnabled: true})
	err = db.Use(plugin.New(plugin.Config{
		Replicas: []plugin.Replica{
			{Name: "r1", Dialector: postgres.Open("postgres://app@replica1/shop")},
			{Name: "r2", Dialector: postgres.Open("postgres://app@replica2/shop")},
		},
		Store:           lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: "shop"}),
		Announce:        true, // a running `freshread tracker` starts publishing for this database
		ReplayFromStore: true, // replay positions from the tracker instead of polling from every process
		DirectWrites:    true, // the tracker runs with --mode logical: other programs' writes are known
		MaxWait:         20 * time.Millisecond,
	}))
	if err != nil {
		panic(err)
	}
}

// A write made outside GORM, published so that reads wait for it.
func Example_recordWrite() {
	ctx := context.Background()
	var p *plugin.Plugin // the plugin installed with db.Use(p)
	var primary *sql.DB  // the primary, outside GORM
	if _, err := primary.ExecContext(ctx, "UPDATE prices SET amount = amount * 2"); err != nil {
		panic(err)
	}
	// After the COMMIT returned: reads of prices wait for a replica that has replayed it.
	if err := p.RecordWrite(ctx, "prices"); err != nil {
		panic(err) // kept pending: this process reads from the primary until it is published
	}
}
