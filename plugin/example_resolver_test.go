package plugin_test

import (
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"

	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

type Order struct {
	ID     uint
	UserID uint
}

// Moving a service with two dbresolver resolvers over: the guide's
// migration section. It needs servers, so it is compiled, not run.
func Example_fromDBResolver() {
	db, err := gorm.Open(postgres.Open("postgres://app@primary/shop"), &gorm.Config{})
	if err != nil {
		panic(err)
	}
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"localhost:6379"}, ContextTimeoutEnabled: true})

	// Was: db.Use(dbresolver.Register(dbresolver.Config{
	//         Replicas: []gorm.Dialector{postgres.Open("postgres://app@replica1/shop")},
	//         Policy:   dbresolver.RoundRobinPolicy(),
	//     }).Register(dbresolver.Config{
	//         Sources:  []gorm.Dialector{postgres.Open("postgres://app@orders-primary/orders")},
	//         Replicas: []gorm.Dialector{postgres.Open("postgres://app@orders-replica1/orders")},
	//     }, &Order{}, "orders"))
	resolver := plugin.Register(plugin.Config{
		Replicas: []plugin.Replica{{Name: "r1", Dialector: postgres.Open("postgres://app@replica1/shop")}},
		Policy:   dbresolver.RoundRobinPolicy(),
		Store:    lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: "shop"}),
	}).Register(plugin.Config{
		Sources:  []gorm.Dialector{postgres.Open("postgres://app@orders-primary/orders")},
		Replicas: []plugin.Replica{{Name: "orders-r1", Dialector: postgres.Open("postgres://app@orders-replica1/orders")}},
		Store:    lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: "orders"}), // another primary: a store of its own
	}, &Order{}, "orders")
	if err := db.Use(resolver); err != nil {
		panic(err)
	}
	defer resolver.Close()

	// Unchanged: hints and transactions on a resolver.
	db.Clauses(dbresolver.Write).First(&Order{}, 7) // the orders primary
	err = db.Clauses(dbresolver.Use("orders")).Transaction(func(tx *gorm.DB) error {
		return tx.Create(&Order{UserID: 7}).Error // on the orders primary, published after COMMIT
	})
	if err != nil {
		panic(err)
	}
}
