// Command sharddemo starts a PostgreSQL primary with two replicas, makes
// four shard databases on it, and shows orders spread over the shards by
// user ID, found again by order ID (shard bits in the minted ID), with the
// server that answered.
//
//	go run ./example/cmd/sharddemo
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/sharding"
)

type Order struct {
	ID     int64 `gorm:"primaryKey;autoIncrement:false"`
	UserID int64 `gorm:"index"`
	Status string
}

func main() {
	err := run()
	testcluster.Shutdown()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sharddemo:", err)
		os.Exit(1)
	}
}

// quiet returns a new config per gorm.Open: a *gorm.Config shared by two
// gorm.Open calls makes them share callbacks and pool.
func quiet() *gorm.Config { return &gorm.Config{Logger: logger.Discard} }

func run() error {
	ctx := context.Background()
	pg, err := testcluster.SharedPostgres()
	if err != nil {
		return err
	}
	names := []string{"s0", "s1", "s2", "s3"}
	cfg := sharding.Config{
		Tables:    []sharding.Table{{Name: "orders", Key: "user_id", ID: "id"}},
		Algorithm: sharding.EvenBuckets(1024, names...),
		HotUsers:  map[int64]string{4242: "s3"},
	}
	direct := map[string]*gorm.DB{}
	for _, n := range names {
		dbName, err := pg.NewDatabase(ctx)
		if err != nil {
			return err
		}
		d, err := gorm.Open(postgres.Open(pg.PrimaryDSN(dbName)), quiet())
		if err != nil {
			return err
		}
		if err := d.AutoMigrate(&Order{}); err != nil {
			return err
		}
		direct[n] = d
		sc := sharding.ShardConfig{Name: n, Dialector: postgres.Open(pg.PrimaryDSN(dbName)),
			Freshness: plugin.Config{PollInterval: 5 * time.Millisecond}}
		for i := 0; i < pg.Replicas(); i++ {
			sc.Replicas = append(sc.Replicas, plugin.Replica{Name: fmt.Sprintf("r%d", i), Dialector: postgres.Open(pg.ReplicaDSN(i, dbName))})
		}
		cfg.Shards = append(cfg.Shards, sc)
	}
	if err := pg.WaitCaughtUp(ctx); err != nil {
		return err
	}
	ids, err := sharding.NewIDGenerator(ctx, sharding.IDConfig{Worker: 1})
	if err != nil {
		return err
	}
	defer ids.Close()
	cfg.IDs = ids
	defName, err := pg.NewDatabase(ctx)
	if err != nil {
		return err
	}
	db, err := gorm.Open(postgres.Open(pg.PrimaryDSN(defName)), quiet())
	if err != nil {
		return err
	}
	s := sharding.New(cfg)
	if err := db.Use(s); err != nil {
		return err
	}
	defer s.Close()

	var orders []Order
	for u := int64(1); u <= 40; u++ {
		orders = append(orders, Order{UserID: u * 29, Status: "placed"}, Order{UserID: u * 29, Status: "placed"})
	}
	orders = append(orders, Order{UserID: 4242, Status: "hot"})
	if err := db.Create(&orders).Error; err != nil {
		return err
	}
	fmt.Printf("created %d orders for 41 users in one batch (split per shard)\n", len(orders))
	for _, n := range names {
		var c int64
		if err := direct[n].Model(&Order{}).Count(&c).Error; err != nil {
			return err
		}
		fmt.Printf("  %s holds %d orders\n", n, c)
	}
	if err := pg.WaitCaughtUp(ctx); err != nil {
		return err
	}
	time.Sleep(50 * time.Millisecond)
	for _, o := range []Order{orders[0], orders[31], orders[64], orders[len(orders)-1]} {
		var r struct {
			Status string
			Port   int
		}
		if err := db.Model(&Order{}).Select("status, inet_server_port() AS port").Where("id = ?", o.ID).Scan(&r).Error; err != nil {
			return err
		}
		d, _ := sharding.DecodeID(o.ID)
		role := "replica"
		if r.Port == pg.PrimaryPort() {
			role = "primary"
		}
		fmt.Printf("order %d (user %d, bucket %d, hot %v) -> shard %s, %q from the %s (port %d)\n",
			o.ID, o.UserID, d.Bucket, d.Hot, s.ShardOf(o.UserID), r.Status, role, r.Port)
	}
	var all []Order
	if err := db.Where("status = ?", "placed").Find(&all).Error; err != nil {
		return err
	}
	fmt.Printf("scatter read over 4 shards: %d placed orders\n", len(all))
	return nil
}
