// Command demo starts a PostgreSQL primary with two streaming replicas
// (internal/harness/testcluster), runs the example order service against it, first
// with plain dbresolver (replicas always) and then with freshread, pauses
// replay on the replicas, and prints which server answered each read and
// what it returned; then a trigger-written table read fresh thanks to the
// tracker's dependency graph. Run it with `make demo`.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/plugin/dbresolver"

	"github.com/freshread/freshread/example"
	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/registry"
	"github.com/freshread/freshread/tracker"
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
	// Redis, needed by the tracker's part, starts beside PostgreSQL.
	testcluster.Prestart("postgres", "redis")
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
	if err := d.scenario(&example.Service{DB: fresh}); err != nil {
		return err
	}
	return d.triggerScenario(freshReplicas)
}

// triggerScenario: a trigger on orders writes order_events. The plugin only
// sees the write to orders; the tracker (run in process here) publishes
// the trigger dependency orders -> order_events in Redis, and the plugin
// picks it up, so the trigger-written table is read fresh too.
func (d *demo) triggerScenario(replicas []plugin.Replica) error {
	ctx := d.ctx
	fmt.Println("\n3. a trigger on orders writes order_events; the tracker publishes that dependency")
	setup, err := gorm.Open(postgres.Open(d.pg.PrimaryDSN(d.name)), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	if err := setup.Exec(`CREATE TABLE order_events (id serial PRIMARY KEY, order_id int, what text);
CREATE FUNCTION order_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO order_events(order_id, what) VALUES (NEW.id, 'status ' || NEW.status); RETURN NEW; END $$;
CREATE TRIGGER order_event AFTER UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION order_event();`).Error; err != nil {
		return err
	}
	rs, err := testcluster.SharedRedis()
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	store := lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: d.name})

	dsn, err := tracker.DSNTemplate("postgres://postgres@{host}:{port}/{database}?sslmode=disable")
	if err != nil {
		return err
	}
	entry := registry.Entry{Host: d.pg.Host(), Port: d.pg.PrimaryPort(), Database: d.name}
	tr, err := tracker.New(tracker.Config{Redis: rdb, DSN: dsn, Databases: []registry.Entry{entry}, NoRegistry: true,
		Mode: tracker.ModeNone, DependencyInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	tctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = tr.Run(tctx) }()
	defer func() { stop(); <-done }()
	for {
		g, err := store.Dependents(ctx)
		if err == nil && len(g.Graph["orders"]) > 0 {
			fmt.Printf("  tracker published: orders -> %v\n", g.Graph["orders"])
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}

	db, err := gorm.Open(postgres.Open(d.pg.PrimaryDSN(d.name)), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	p := plugin.New(plugin.Config{Replicas: replicas, Store: store})
	if err := db.Use(p); err != nil {
		return err
	}
	defer p.Close()
	svc := &example.Service{DB: db}
	o, err := svc.PlaceOrder(ctx, 7)
	if err != nil {
		return err
	}
	if err := d.pg.WaitCaughtUp(ctx); err != nil {
		return err
	}
	time.Sleep(100 * time.Millisecond)
	for i := 0; i < d.pg.Replicas(); i++ {
		if err := d.pg.PauseReplay(ctx, i); err != nil {
			return err
		}
	}
	fmt.Println("  -- replay paused on every replica; order set to \"paid\" (the trigger adds an event) --")
	if err := svc.SetStatus(ctx, o.ID, "paid"); err != nil {
		return err
	}
	var ev struct {
		What string
		Port int
	}
	err = db.WithContext(ctx).Table("order_events").Select("coalesce(max(what), 'none') AS what, inet_server_port() AS port").
		Where("order_id = ?", o.ID).Scan(&ev).Error
	if err := d.show("latest event of the order:", example.Served{Value: ev.What, Port: ev.Port}, err); err != nil {
		return err
	}
	for i := 0; i < d.pg.Replicas(); i++ {
		if err := d.pg.ResumeReplay(ctx, i); err != nil {
			return err
		}
	}
	return nil
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
