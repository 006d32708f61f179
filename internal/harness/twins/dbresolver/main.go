// Command dbresolver is the dbresolver twin of the binary-size measurement
// (see package twins): the freshread twin's service with
// gorm.io/plugin/dbresolver and a go-redis client. It is built, not run.
package main

import (
	"log"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"
)

func main() {
	db, err := gorm.Open(postgres.Open("host=primary dbname=app"), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379"})
	defer rdb.Close()
	err = db.Use(dbresolver.Register(dbresolver.Config{
		Replicas: []gorm.Dialector{postgres.Open("host=replica1 dbname=app")},
	}))
	if err != nil {
		log.Fatal(err)
	}
}
