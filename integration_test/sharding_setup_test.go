package integration_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/sharding"
)

// ShOrder is the sharded table (orders, by user_id); ShItem is colocated
// (order_items, by user_id); ShProduct stays on the default database.
type ShOrder struct {
	ID     int64 `gorm:"primaryKey;autoIncrement:false"`
	UserID int64 `gorm:"index"`
	Status string
	Amount int
}

func (ShOrder) TableName() string { return "orders" }

type ShItem struct {
	ID      int64 `gorm:"primaryKey"`
	OrderID int64
	UserID  int64 `gorm:"index"`
	Sku     string
}

func (ShItem) TableName() string { return "order_items" }

type ShProduct struct {
	ID   int64 `gorm:"primaryKey"`
	Name string
}

func (ShProduct) TableName() string { return "products" }

var shardNames = []string{"s0", "s1", "s2", "s3"}

// shEnv is a default database, four shard databases on the shared cluster
// (each served by the two replicas too, through a freshread plugin per
// shard) and the sharding plugin.
type shEnv struct {
	t       *testing.T
	pg      *testcluster.Postgres
	defName string
	shardDB map[string]string // shard -> database name
	db      *gorm.DB
	s       *sharding.Sharding
	direct  map[string]*gorm.DB // plain connections to each shard's primary
	names   []string            // every shard: shardNames, then the extra ones (shEnvSpec.extra)
	base    sharding.Config     // the plugin's configuration before the options (another)

	mu        sync.Mutex
	counts    map[string]int // statements per shard
	routes    []sharding.Route
	decisions []plugin.Decision // of the default database's freshread plugin (newShEnvFresh)
}

type shOpt func(*sharding.Config)

// shEnvSpec is what an environment is made of beyond the plugin's Config.
type shEnvSpec struct {
	freshness bool     // a freshread plugin on the default database (newShEnvFresh)
	extra     []string // shards added after s0..s3, owning no bucket in Config's map
}

func newShEnv(t *testing.T, opts ...shOpt) *shEnv {
	t.Helper()
	return openShEnv(t, false, opts...)
}

// withMapStore makes the plugin follow a shared bucket map.
func withMapStore(st sharding.MapStore) shOpt { return func(c *sharding.Config) { c.Map = st } }

// newShEnvFresh is newShEnv with a freshread plugin (the two replicas, an
// in-memory store) on the default database, installed before the
// sharding plugin.
func newShEnvFresh(t *testing.T, opts ...shOpt) *shEnv {
	t.Helper()
	return openShEnv(t, true, opts...)
}

func openShEnv(t *testing.T, freshness bool, opts ...shOpt) *shEnv {
	t.Helper()
	return openShEnvSpec(t, shEnvSpec{freshness: freshness}, opts...)
}

func openShEnvSpec(t *testing.T, spec shEnvSpec, opts ...shOpt) *shEnv {
	t.Helper()
	freshness := spec.freshness
	pg := testcluster.PostgresFor(t)
	e := &shEnv{t: t, pg: pg, shardDB: map[string]string{}, direct: map[string]*gorm.DB{}, counts: map[string]int{}}
	e.names = append(append([]string(nil), shardNames...), spec.extra...)
	e.defName = pg.CreateDatabase(t)
	def, err := gorm.Open(postgres.Open(pg.PrimaryDSN(e.defName)), quiet())
	if err != nil {
		t.Fatal(err)
	}
	if err := def.AutoMigrate(&ShProduct{}); err != nil {
		t.Fatal(err)
	}
	def.Create(&ShProduct{ID: 1, Name: "widget"})
	closeDB(def)
	cfg := sharding.Config{
		Tables: []sharding.Table{
			{Name: "orders", Key: "user_id", ID: "id"},
			{Name: "order_items", Key: "user_id"},
		},
		Algorithm: sharding.EvenBuckets(1024, shardNames...),
		OnRoute: func(_ context.Context, r sharding.Route) {
			e.mu.Lock()
			e.routes = append(e.routes, r)
			e.mu.Unlock()
		},
	}
	for _, name := range e.names {
		dbName := pg.CreateDatabase(t)
		e.shardDB[name] = dbName
		d, err := gorm.Open(postgres.Open(pg.PrimaryDSN(dbName)), quiet())
		if err != nil {
			t.Fatal(err)
		}
		if err := d.AutoMigrate(&ShOrder{}, &ShItem{}); err != nil {
			t.Fatal(err)
		}
		e.direct[name] = d
		t.Cleanup(func() { closeDB(d) })
	}
	cfg.Shards = e.shardConfigs()
	if err := pg.WaitCaughtUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.base = cfg
	e.base.OnRoute = nil
	for _, o := range opts {
		o(&cfg)
	}
	db, err := gorm.Open(postgres.Open(pg.PrimaryDSN(e.defName)), quiet())
	if err != nil {
		t.Fatal(err)
	}
	if freshness {
		fc := plugin.Config{PollInterval: 5 * time.Millisecond, OnDecision: func(_ context.Context, d plugin.Decision) {
			e.mu.Lock()
			e.decisions = append(e.decisions, d)
			e.mu.Unlock()
		}}
		for i := 0; i < pg.Replicas(); i++ {
			fc.Replicas = append(fc.Replicas, plugin.Replica{Name: replicaName(i), Dialector: postgres.Open(pg.ReplicaDSN(i, e.defName))})
		}
		p := plugin.New(fc)
		if err := db.Use(p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
	}
	e.s = sharding.New(cfg)
	if err := db.Use(e.s); err != nil {
		t.Fatal(err)
	}
	e.db = db
	t.Cleanup(func() {
		e.s.Close()
		closeDB(db)
	})
	// Count the statements each shard runs.
	for _, name := range e.names {
		sdb, _ := e.s.ShardDB(name)
		name := name
		count := func(db *gorm.DB) {
			if twoPhaseStatement(db.Statement.SQL.String()) {
				return // the plugin's own, possibly a recovery in the background
			}
			e.mu.Lock()
			e.counts[name]++
			e.mu.Unlock()
		}
		cb := sdb.Callback()
		for _, err := range []error{
			cb.Query().Before("*").Register("test:count", count),
			cb.Row().Before("*").Register("test:count", count),
			cb.Create().Before("*").Register("test:count", count),
			cb.Update().Before("*").Register("test:count", count),
			cb.Delete().Before("*").Register("test:count", count),
			cb.Raw().Before("*").Register("test:count", count),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return e
}

// twoPhaseStatement reports whether a statement is the sharding plugin's
// own end of a prepared part (COMMIT PREPARED, ROLLBACK PREPARED), which
// its recovery may run at any time.
func twoPhaseStatement(q string) bool {
	return strings.HasPrefix(q, "COMMIT PREPARED ") || strings.HasPrefix(q, "ROLLBACK PREPARED ")
}

// shardConfigs returns the configuration of every shard (new
// dialectors: one per plugin instance).
func (e *shEnv) shardConfigs() []sharding.ShardConfig {
	var out []sharding.ShardConfig
	for _, name := range e.names {
		dbName := e.shardDB[name]
		sc := sharding.ShardConfig{
			Name:      name,
			Dialector: postgres.Open(e.pg.PrimaryDSN(dbName)),
			Freshness: plugin.Config{PollInterval: 5 * time.Millisecond},
		}
		for i := 0; i < e.pg.Replicas(); i++ {
			sc.Replicas = append(sc.Replicas, plugin.Replica{Name: replicaName(i), Dialector: postgres.Open(e.pg.ReplicaDSN(i, dbName))})
		}
		out = append(out, sc)
	}
	return out
}

// another opens a second plugin over the same databases (another
// process, as far as the plugin is concerned: its own pools and shard
// plugins), configured as the environment's before its options, then
// opts.
func (e *shEnv) another(opts ...shOpt) (*gorm.DB, *sharding.Sharding) {
	e.t.Helper()
	cfg := e.base
	cfg.Shards = e.shardConfigs()
	for _, o := range opts {
		o(&cfg)
	}
	return openSharded(e.t, postgres.Open(e.pg.PrimaryDSN(e.defName)), cfg)
}

// openSharded opens the default database with a sharding plugin made
// from cfg, both closed when the test ends.
func openSharded(t *testing.T, def gorm.Dialector, cfg sharding.Config) (*gorm.DB, *sharding.Sharding) {
	t.Helper()
	db, err := gorm.Open(def, quiet())
	if err != nil {
		t.Fatal(err)
	}
	s := sharding.New(cfg)
	if err := db.Use(s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		closeDB(db)
	})
	return db, s
}

func (e *shEnv) resetCounts() {
	e.mu.Lock()
	e.counts = map[string]int{}
	e.routes = nil
	e.mu.Unlock()
}

func (e *shEnv) countsSnapshot() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.counts))
	for k, v := range e.counts {
		out[k] = v
	}
	return out
}

// onShard lists the order IDs stored on a shard, read from its primary
// directly (not through the plugin).
func (e *shEnv) onShard(name string) map[int64]int64 {
	e.t.Helper()
	var rows []ShOrder
	if err := e.direct[name].Find(&rows).Error; err != nil {
		e.t.Fatal(err)
	}
	out := make(map[int64]int64, len(rows))
	for _, r := range rows {
		out[r.ID] = r.UserID
	}
	return out
}

func (e *shEnv) totalOrders() int {
	n := 0
	for _, name := range e.names {
		n += len(e.onShard(name))
	}
	return n
}

func fixedIDs(t *testing.T, worker int) *sharding.IDGenerator {
	t.Helper()
	g, err := sharding.NewIDGenerator(context.Background(), sharding.IDConfig{Worker: worker})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func withIDs(g *sharding.IDGenerator) shOpt { return func(c *sharding.Config) { c.IDs = g } }

// withLookup routes the orders table's IDs through lk (Table.Lookup).
func withLookup(lk sharding.Lookup) shOpt {
	return func(c *sharding.Config) {
		c.Lookup = lk
		c.Tables[0].Lookup = true
	}
}

// waitCaughtUp waits until the replicas have replayed the primary's
// position and every shard's freshread plugin has polled them since
// (waitPluginsCaughtUp).
func (e *shEnv) waitCaughtUp() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.pg.WaitCaughtUp(ctx); err != nil {
		e.t.Fatal(err)
	}
	var plugs []*plugin.Plugin
	for _, name := range e.s.ShardNames() {
		if p, err := e.s.Freshness(name); err == nil {
			plugs = append(plugs, p)
		}
	}
	waitPluginsCaughtUp(e.t, plugs)
}

func (e *shEnv) pauseAll() {
	e.t.Helper()
	for i := 0; i < e.pg.Replicas(); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := e.pg.PauseReplay(ctx, i)
		cancel()
		if err != nil {
			e.t.Fatal(err)
		}
		i := i
		e.t.Cleanup(func() { _ = e.pg.ResumeReplay(context.Background(), i) })
	}
}

func (e *shEnv) resumeAll() {
	e.t.Helper()
	for i := 0; i < e.pg.Replicas(); i++ {
		if err := e.pg.ResumeReplay(context.Background(), i); err != nil {
			e.t.Fatal(err)
		}
	}
	e.waitCaughtUp()
}

func (e *shEnv) isReplica(port int) bool {
	for i := 0; i < e.pg.Replicas(); i++ {
		if e.pg.ReplicaPort(i) == port {
			return true
		}
	}
	return false
}
