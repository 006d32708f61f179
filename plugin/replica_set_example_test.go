package plugin_test

import (
	"context"
	"fmt"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/plugin"
)

// Replicas added and removed while the service runs
// (docs/guide/operations.md, "Adding and removing replicas"). Compiled,
// not run: it needs servers.
func Example_setReplicas() {
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
	// r2 joins (it serves reads once a poll has found it fresh enough);
	// later r1 leaves (its reads in flight finish, then its connections
	// close). r1 is kept open while it is named with the same DSN.
	ctx := context.Background()
	err = p.SetReplicas(ctx, []plugin.Replica{
		{Name: "r1", Dialector: postgres.Open("postgres://app@replica1/shop")},
		{Name: "r2", Dialector: postgres.Open("postgres://app@replica2/shop")},
	})
	if err != nil {
		panic(err) // nothing changed: a bad list, a server that is not a replica, ...
	}
	err = p.SetReplicas(ctx, []plugin.Replica{
		{Name: "r2", Dialector: postgres.Open("postgres://app@replica2/shop")},
	})
	if err != nil {
		panic(err)
	}
}

// Replicas found in DNS (docs/guide/operations.md, "Replicas from DNS").
// Compiled, not run: it needs servers.
func Example_discovery() {
	db, err := gorm.Open(postgres.Open("postgres://app@primary/shop"), &gorm.Config{})
	if err != nil {
		panic(err)
	}
	err = db.Use(plugin.New(plugin.Config{
		Discovery: &plugin.DNSDiscovery{
			// SRV records: each replica's host and port.
			Name:       "_postgresql._tcp.replicas.shop.service.consul",
			Record:     plugin.RecordSRV,
			Nameserver: "127.0.0.1:8600", // the local Consul agent
			Interval:   30 * time.Second,
			Dialector: func(host string, port int) gorm.Dialector {
				return postgres.Open(fmt.Sprintf("host=%s port=%d user=app dbname=shop", host, port))
			},
		},
		ReplicaPool: plugin.Pool{MaxOpenConns: 8, ConnMaxLifetime: 30 * time.Minute},
	}))
	if err != nil {
		panic(err)
	}
}
