// Command gettingstarted is the complete program of docs/guide/getting-started.md:
// a small HTTP service on GORM whose reads go to fresh replicas.
package main

import (
	"context"
	"encoding/json"
	"log"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/freshreadprom"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

type Product struct {
	ID    uint
	Name  string
	Price int64
}

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	db, err := gorm.Open(postgres.Open(os.Getenv("PRIMARY_DSN")), &gorm.Config{})
	if err != nil {
		return err
	}
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{os.Getenv("REDIS_ADDR")}, ContextTimeoutEnabled: true})
	defer rdb.Close()

	// Keep the *plugin.Plugin: Close, Collector and RecordWrite are its methods.
	p := plugin.New(plugin.Config{
		Replicas: []plugin.Replica{
			{Name: "r1", Dialector: postgres.Open(os.Getenv("REPLICA1_DSN"))},
			{Name: "r2", Dialector: postgres.Open(os.Getenv("REPLICA2_DSN"))},
		},
		Store: lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: "shop"}), // every process of the service shares it
	})
	if err := db.Use(p); err != nil {
		return err // the error names the setting and the remedy
	}
	defer p.Close() // stops the poller, ends the lease and closes the replicas' pools

	if err := db.WithContext(ctx).AutoMigrate(&Product{}); err != nil {
		return err
	}

	// Metrics: routing decisions, replica lag, store health.
	prometheus.MustRegister(freshreadprom.Plugin(p))

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.Handler())
	mux.HandleFunc("GET /products/{id}", func(w http.ResponseWriter, r *http.Request) {
		var prod Product
		// A replica that has replayed the last write of products (and this
		// caller's own writes), else the primary.
		if err := db.WithContext(r.Context()).First(&prod, r.PathValue("id")).Error; err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		json.NewEncoder(w).Encode(prod)
	})
	mux.HandleFunc("PUT /products/{id}", func(w http.ResponseWriter, r *http.Request) {
		var prod Product
		if err := json.NewDecoder(r.Body).Decode(&prod); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// The primary; once committed, reads of products wait for it.
		err := db.WithContext(r.Context()).Model(&Product{}).Where("id = ?", r.PathValue("id")).
			Updates(map[string]any{"name": prod.Name, "price": prod.Price}).Error
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})

	// The middleware carries each client's session (its last writes) from
	// request to request in a cookie: a client reads its own writes.
	return http.ListenAndServe(":8080", plugin.Middleware(plugin.MiddlewareConfig{})(mux))
}
