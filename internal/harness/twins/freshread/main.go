// Command freshread is the freshread twin of the binary-size measurement
// (see package twins): a PostgreSQL-only service using the plugin with a
// Redis store and nothing else. It is built, not run.
package main

import (
	"log"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

func main() {
	db, err := gorm.Open(postgres.Open("host=primary dbname=app"), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379"})
	err = db.Use(plugin.New(plugin.Config{
		Replicas: []plugin.Replica{{Name: "r1", Dialector: postgres.Open("host=replica1 dbname=app")}},
		Store:    lsnstore.NewRedis(rdb, lsnstore.RedisOptions{}),
	}))
	if err != nil {
		log.Fatal(err)
	}
}
