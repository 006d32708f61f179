// Command demo starts a PostgreSQL primary with two streaming replicas
// (internal/testcluster), runs the example order service against it, first
// with plain dbresolver (replicas always) and then with freshread, pauses
// replay on the replicas, and prints which server answered each read and
// what it returned. Run it with `make demo`.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/plugin/dbresolver"

	"github.com/freshread/freshread/example"
	"github.com/freshread/freshread/internal/testcluster"
	"github.com/freshread/freshread/plugin"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		testcluster.Shutdown()
		os.Exit(1)
	}
	testcluster.Shutdown()
}

type demo struct {
	ctx  context.Context
	pg   *testcluster.Postgres
	name string
}

func (d *demo) role(port int) string {
	if port == d.pg.PrimaryPort() {
		return "primary"
	}
	for i := 0; i < d.pg.Replicas(); i++ {
		if port == d.pg.ReplicaPort(i) {
			return fmt.Sprintf("replica %d", i)
		}
	}
	return "?"
}

func (d *demo) show(what string, s example.Served, err error) error {
	if err != nil {
		return err
	}
	fmt.Printf("  %-44s %-10q from %s (port %d)\n", what, s.Value, d.role(s.Port), s.Port)
	return nil
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	pg, err := testcluster.SharedPostgres()
	if err != nil {
		return err
	}
	fmt.Printf("PostgreSQL primary (port %d) + %d streaming replicas started in %v\n",
		pg.PrimaryPort(), pg.Replicas(), time.Since(start).Round(time.Millisecond))
	name, err := pg.NewDatabase(ctx)
	if err != nil {
		return err
	}
	d := &demo{ctx: ctx, pg: pg, name: name}
	cfg := &gorm.Config{Logger: logger.Discard}

	// Schema and a product, replicated.
	setup, err := gorm.Open(postgres.Open(pg.PrimaryDSN(name)), cfg)
	if err != nil {
		return err
	}
	svc := &example.Service{DB: setup}
	if err := svc.Migrate(ctx); err != nil {
		return err
	}
	if err := setup.Create(&example.Product{ID: 1, Name: "teapot"}).Error; err != nil {
		return err
	}
	if err := pg.WaitCaughtUp(ctx); err != nil {
		return err
	}

	var replicas []gorm.Dialector
	var freshReplicas []plugin.Replica
	for i := 0; i < pg.Replicas(); i++ {
		replicas = append(replicas, postgres.Open(pg.ReplicaDSN(i, name)))
		freshReplicas = append(freshReplicas, plugin.Replica{Name: fmt.Sprintf("replica%d", i), Dialector: postgres.Open(pg.ReplicaDSN(i, name))})
	}

	fmt.Println("\n1. dbresolver alone (reads always on a replica)")
	plain, err := gorm.Open(postgres.Open(pg.PrimaryDSN(name)), cfg)
	if err != nil {
		return err
	}
	if err := plain.Use(dbresolver.Register(dbresolver.Config{Replicas: replicas})); err != nil {
		return err
	}
	if err := d.scenario(&example.Service{DB: plain}); err != nil {
		return err
	}

	fmt.Println("\n2. freshread (db.Use(plugin.New(cfg)))")
	fresh, err := gorm.Open(postgres.Open(pg.PrimaryDSN(name)), cfg)
	if err != nil {
		return err
	}
	p := plugin.New(plugin.Config{Replicas: freshReplicas})
	if err := fresh.Use(p); err != nil {
		return err
	}
	defer p.Close()
	return d.scenario(&example.Service{DB: fresh})
}

// scenario places an order, reads it, pauses replay, changes it, reads it
// again, resumes replay and reads it once more.
func (d *demo) scenario(svc *example.Service) error {
	ctx := d.ctx
	o, err := svc.PlaceOrder(ctx, 42)
	if err != nil {
		return err
	}
	if err := d.pg.WaitCaughtUp(ctx); err != nil {
		return err
	}
	time.Sleep(100 * time.Millisecond) // let the plugin's poller see the replicas catch up
	s, err := svc.OrderStatus(ctx, o.ID)
	if err := d.show("order status, replicas caught up:", s, err); err != nil {
		return err
	}
	for i := 0; i < d.pg.Replicas(); i++ {
		if err := d.pg.PauseReplay(ctx, i); err != nil {
			return err
		}
	}
	fmt.Println("  -- replay paused on every replica; order set to \"shipped\" on the primary --")
	if err := svc.SetStatus(ctx, o.ID, "shipped"); err != nil {
		return err
	}
	s, err = svc.OrderStatus(ctx, o.ID)
	if err := d.show("order status right after the write:", s, err); err != nil {
		return err
	}
	if s.Value != "shipped" {
		fmt.Println("     ^ STALE READ: the replica has not replayed the write")
	}
	s, err = svc.ProductName(ctx, 1)
	if err := d.show("product name (table not written):", s, err); err != nil {
		return err
	}
	for i := 0; i < d.pg.Replicas(); i++ {
		if err := d.pg.ResumeReplay(ctx, i); err != nil {
			return err
		}
	}
	if err := d.pg.WaitCaughtUp(ctx); err != nil {
		return err
	}
	time.Sleep(100 * time.Millisecond)
	fmt.Println("  -- replay resumed, replicas caught up --")
	s, err = svc.OrderStatus(ctx, o.ID)
	return d.show("order status:", s, err)
}
