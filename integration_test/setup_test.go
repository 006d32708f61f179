package integration_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/internal/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// Item is the table most tests write; Other is one they leave alone.
type Item struct {
	ID      uint `gorm:"primaryKey"`
	Name    string
	Version int
	Parts   []Part
}

type Part struct {
	ID     uint `gorm:"primaryKey"`
	ItemID uint
	Label  string
}

type Other struct {
	ID   uint `gorm:"primaryKey"`
	Note string
}

// env is one test's database, cluster and plugin.
type env struct {
	t      *testing.T
	pg     *testcluster.Postgres
	dbName string
	db     *gorm.DB
	plug   *plugin.Plugin
	store  lsnstore.Store

	mu        sync.Mutex
	decisions []plugin.Decision
}

type envOpt func(*plugin.Config)

func withStore(s lsnstore.Store) envOpt { return func(c *plugin.Config) { c.Store = s } }

func withConfig(f func(*plugin.Config)) envOpt { return f }

// newEnv creates a fresh database with the test tables (replicated to both
// replicas before it returns) and a *gorm.DB with the plugin installed.
func newEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	pg := testcluster.PostgresFor(t)
	e := &env{t: t, pg: pg, dbName: pg.CreateDatabase(t)}
	setup, err := gorm.Open(postgres.Open(pg.PrimaryDSN(e.dbName)), quiet())
	if err != nil {
		t.Fatal(err)
	}
	if err := setup.AutoMigrate(&Item{}, &Part{}, &Other{}); err != nil {
		t.Fatal(err)
	}
	if err := setup.Create(&Other{ID: 1, Note: "untouched"}).Error; err != nil {
		t.Fatal(err)
	}
	closeDB(setup)
	e.waitCaughtUp()
	e.db, e.plug = e.open(opts...)
	return e
}

// open opens another *gorm.DB on the same database with its own plugin.
func (e *env) open(opts ...envOpt) (*gorm.DB, *plugin.Plugin) {
	e.t.Helper()
	db, err := gorm.Open(postgres.Open(e.pg.PrimaryDSN(e.dbName)), quiet())
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := plugin.Config{
		Store:        e.store,
		PollInterval: 5 * time.Millisecond,
		OnDecision: func(_ context.Context, d plugin.Decision) {
			e.mu.Lock()
			e.decisions = append(e.decisions, d)
			e.mu.Unlock()
		},
	}
	for i := 0; i < e.pg.Replicas(); i++ {
		cfg.Replicas = append(cfg.Replicas, plugin.Replica{
			Name:      replicaName(i),
			Dialector: postgres.Open(e.pg.ReplicaDSN(i, e.dbName)),
		})
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.Store == nil {
		cfg.Store = lsnstore.NewMemory()
	}
	if e.store == nil {
		e.store = cfg.Store
	}
	p := plugin.New(cfg)
	if err := db.Use(p); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		p.Close()
		closeDB(db)
	})
	return db, p
}

func replicaName(i int) string { return []string{"r0", "r1", "r2", "r3"}[i] }

func quiet() *gorm.Config { return &gorm.Config{Logger: logger.Discard} }

func closeDB(db *gorm.DB) {
	if s, err := db.DB(); err == nil {
		s.Close()
	}
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	e.t.Cleanup(cancel)
	return ctx
}

func (e *env) waitCaughtUp() {
	e.t.Helper()
	if err := e.pg.WaitCaughtUp(e.ctx()); err != nil {
		e.t.Fatal(err)
	}
}

// pauseAll pauses replay on every replica and resumes it when the test ends.
func (e *env) pauseAll() {
	e.t.Helper()
	for i := 0; i < e.pg.Replicas(); i++ {
		e.pause(i)
	}
}

func (e *env) pause(i int) {
	e.t.Helper()
	if err := e.pg.PauseReplay(e.ctx(), i); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = e.pg.ResumeReplay(context.Background(), i) })
}

// resumeAll resumes replay and waits until every replica has caught up and
// the plugin's poller has seen it.
func (e *env) resumeAll() {
	e.t.Helper()
	for i := 0; i < e.pg.Replicas(); i++ {
		if err := e.pg.ResumeReplay(e.ctx(), i); err != nil {
			e.t.Fatal(err)
		}
	}
	e.waitCaughtUp()
	time.Sleep(50 * time.Millisecond) // several poll intervals (5ms): the poller has seen the replicas catch up
}

// served is a row with the server port that produced it.
type served struct {
	Name    string
	Version int
	Port    int
}

// readItem reads item id through the plugin with inet_server_port() in the
// same statement, so data and server are observed together.
func (e *env) readItem(db *gorm.DB, id uint) served {
	e.t.Helper()
	var s served
	err := db.Model(&Item{}).Select("name, version, inet_server_port() AS port").Where("id = ?", id).Scan(&s).Error
	if err != nil {
		e.t.Fatalf("read item %d: %v", id, err)
	}
	return s
}

func (e *env) readOther(db *gorm.DB) served {
	e.t.Helper()
	var s served
	err := db.Model(&Other{}).Select("note AS name, 0 AS version, inet_server_port() AS port").Where("id = 1").Scan(&s).Error
	if err != nil {
		e.t.Fatalf("read other: %v", err)
	}
	return s
}

func (e *env) isReplica(port int) bool {
	for i := 0; i < e.pg.Replicas(); i++ {
		if e.pg.ReplicaPort(i) == port {
			return true
		}
	}
	return false
}

func (e *env) mustReplica(s served, what string) {
	e.t.Helper()
	if !e.isReplica(s.Port) {
		e.t.Fatalf("%s: served by port %d (primary is %d), want a replica", what, s.Port, e.pg.PrimaryPort())
	}
}

func (e *env) mustPrimary(s served, what string) {
	e.t.Helper()
	if s.Port != e.pg.PrimaryPort() {
		e.t.Fatalf("%s: served by port %d, want the primary %d", what, s.Port, e.pg.PrimaryPort())
	}
}

// newRedisStore returns a Redis store on the package's Redis server with a
// database name unique to the test.
func newRedisStore(t *testing.T, database string) (*lsnstore.Redis, *testcluster.Redis) {
	t.Helper()
	r := testcluster.RedisFor(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{r.Addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	return lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: database}), r
}
