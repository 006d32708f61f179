package plugin_test

import (
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/plugin"
)

// Replica pools sized for a fleet (docs/guide/configuration.md, "Replica
// pools"). Compiled, not run: it needs servers.
func Example_replicaPools() {
	db, err := gorm.Open(postgres.Open("postgres://app@primary/shop"), &gorm.Config{})
	if err != nil {
		panic(err)
	}
	err = db.Use(plugin.New(plugin.Config{
		// Every replica: at most 8 connections per process, 4 kept idle,
		// none older than 30 minutes.
		ReplicaPool: plugin.Pool{MaxOpenConns: 8, MaxIdleConns: 4, ConnMaxLifetime: 30 * time.Minute},
		Replicas: []plugin.Replica{
			{Name: "r1", Dialector: postgres.Open("postgres://app@replica1/shop")},
			// A smaller server: 4 connections, the rest as above.
			{Name: "r2", Dialector: postgres.Open("postgres://app@replica2/shop"), Pool: plugin.Pool{MaxOpenConns: 4}},
		},
	}))
	if err != nil {
		panic(err)
	}
}
