package sharding_test

import (
	"context"
	"database/sql"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/lookup"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/sharding"
)

// The examples below are the code of docs/guide/sharding.md
// (internal/doccheck checks it). They need servers, so they are compiled,
// not run.

// A sharded service: four shards holding the buckets, four more configured
// for a later move, a shared bucket map, minted IDs and the lookup.
func Example_config() {
	ctx := context.Background()
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"redis:6379"}, ContextTimeoutEnabled: true})
	db, err := gorm.Open(postgres.Open("postgres://app@main/shop"), &gorm.Config{}) // the unsharded tables
	if err != nil {
		panic(err)
	}
	mapDB, err := sql.Open("pgx", "postgres://app@main/shop")
	if err != nil {
		panic(err)
	}
	mapStore := sharding.NewSQLMapStore(mapDB)
	if err := mapStore.EnsureSchema(ctx); err != nil {
		panic(err)
	}
	ids, err := sharding.NewIDGenerator(ctx, sharding.IDConfig{Redis: rdb}) // leases a worker ID
	if err != nil {
		panic(err)
	}
	var shards []sharding.ShardConfig
	for _, name := range []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"} {
		shards = append(shards, sharding.ShardConfig{
			Name:      name,
			Dialector: postgres.Open("postgres://app@" + name + "/shop"),
			Replicas:  []plugin.Replica{{Name: name + "r1", Dialector: postgres.Open("postgres://app@" + name + "-replica/shop")}},
			// One position namespace per shard, the same in every process
			// and in the mover's RecordWrite.
			Freshness: plugin.Config{Store: lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: "shop-" + name})},
		})
	}
	s := sharding.New(sharding.Config{
		Tables: []sharding.Table{
			{Name: "orders", Key: "user_id", ID: "id", Lookup: true},
			{Name: "order_items", Key: "user_id"},
		},
		Shards: shards,
		// s4..s7 own no bucket until moves give them some.
		Algorithm: sharding.EvenBuckets(1024, "s0", "s1", "s2", "s3"),
		Map:       mapStore,
		IDs:       ids,
		Lookup:    lookup.New(lookup.Config{DB: db, Redis: rdb}),
	})
	if err := db.Use(s); err != nil {
		panic(err)
	}
}

// The model of a sharded table whose IDs are minted: the ID is not an
// auto-increment column.
func Example_model() {
	type Order struct {
		ID     int64 `gorm:"primaryKey;autoIncrement:false"`
		UserID int64 `gorm:"index"`
		Total  int64
		At     time.Time
	}
	var db *gorm.DB // with the sharding plugin installed
	o := Order{UserID: 42, Total: 1999}
	db.Create(&o) // o.ID is minted with user 42's bucket in it
}

// Giving an order to another user: a write that would change user_id is
// refused (sharding.ErrShardKeyChange), so the order is created again for
// the new user and the old one deleted.
func Example_moveOrderToAnotherUser() {
	type Order struct {
		ID     int64 `gorm:"primaryKey;autoIncrement:false"`
		UserID int64 `gorm:"index"`
		Total  int64
	}
	var db *gorm.DB // with the sharding plugin installed
	var id, newUser int64
	giveAway := func() error {
		var o Order
		if err := db.First(&o, id).Error; err != nil {
			return err
		}
		moved := o
		moved.ID, moved.UserID = 0, newUser // a new ID, minted with the new user's bucket
		if err := db.Create(&moved).Error; err != nil {
			return err
		}
		return db.Delete(&o).Error
	}
	_ = giveAway
}
