package integration_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/freshreadprom"
	"github.com/freshread/freshread/internal/harness/testcluster"
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

// cluster is what the tests need of a replicated server pair, PostgreSQL
// or MariaDB.
type cluster interface {
	replicas() int
	primaryPort() int
	replicaPort(i int) int
	pause(ctx context.Context, i int) error
	resume(ctx context.Context, i int) error
	waitCaughtUp(ctx context.Context) error
	primary(db string) gorm.Dialector
	replica(i int, db string) gorm.Dialector
	createDatabase(t testing.TB) string
	// portExpr is the SQL expression for the answering server's port.
	portExpr() string
}

type pgCluster struct{ *testcluster.Postgres }

func (c pgCluster) replicas() int                           { return c.Replicas() }
func (c pgCluster) primaryPort() int                        { return c.PrimaryPort() }
func (c pgCluster) replicaPort(i int) int                   { return c.ReplicaPort(i) }
func (c pgCluster) pause(ctx context.Context, i int) error  { return c.PauseReplay(ctx, i) }
func (c pgCluster) resume(ctx context.Context, i int) error { return c.ResumeReplay(ctx, i) }
func (c pgCluster) waitCaughtUp(ctx context.Context) error  { return c.WaitCaughtUp(ctx) }
func (c pgCluster) primary(db string) gorm.Dialector        { return postgres.Open(c.PrimaryDSN(db)) }
func (c pgCluster) replica(i int, db string) gorm.Dialector {
	return postgres.Open(c.ReplicaDSN(i, db))
}
func (c pgCluster) createDatabase(t testing.TB) string { return c.CreateDatabase(t) }
func (c pgCluster) portExpr() string                   { return "inet_server_port()" }

type mariaCluster struct{ *testcluster.MariaDB }

func (c mariaCluster) replicas() int                          { return 1 }
func (c mariaCluster) primaryPort() int                       { return c.PrimaryPort() }
func (c mariaCluster) replicaPort(int) int                    { return c.ReplicaPort() }
func (c mariaCluster) pause(ctx context.Context, _ int) error { return c.StopApply(ctx) }
func (c mariaCluster) resume(ctx context.Context, _ int) error {
	return c.StartApply(ctx)
}
func (c mariaCluster) waitCaughtUp(ctx context.Context) error  { return c.WaitCaughtUp(ctx) }
func (c mariaCluster) primary(db string) gorm.Dialector        { return mysql.Open(c.PrimaryDSN(db)) }
func (c mariaCluster) replica(_ int, db string) gorm.Dialector { return mysql.Open(c.ReplicaDSN(db)) }
func (c mariaCluster) createDatabase(t testing.TB) string      { return c.CreateDatabase(t) }
func (c mariaCluster) portExpr() string                        { return "@@port" }

// env is one test's database, cluster and plugin.
type env struct {
	t      *testing.T
	c      cluster
	pg     *testcluster.Postgres // nil on MariaDB
	dbName string
	db     *gorm.DB
	plug   *plugin.Plugin
	store  lsnstore.Store

	mu        sync.Mutex
	decisions []plugin.Decision
	plugs     []*plugin.Plugin // every plugin open() made
}

// envSettings is what envOpts change: the plugin's Config and how the
// *gorm.DB is opened.
type envSettings struct {
	cfg         plugin.Config
	prepareStmt bool
	primary     gorm.Dialector // nil: the cluster's primary
}

type envOpt func(*envSettings)

func withStore(s lsnstore.Store) envOpt { return func(o *envSettings) { o.cfg.Store = s } }

func withConfig(f func(*plugin.Config)) envOpt { return func(o *envSettings) { f(&o.cfg) } }

// withPrimary opens the *gorm.DB on primary (a relay in front of the
// cluster's primary, say).
func withPrimary(primary gorm.Dialector) envOpt { return func(o *envSettings) { o.primary = primary } }

// withPrepareStmt opens the *gorm.DB with gorm.Config.PrepareStmt.
func withPrepareStmt() envOpt { return func(o *envSettings) { o.prepareStmt = true } }

// newEnv creates a fresh database with the test tables (replicated to both
// replicas before it returns) and a *gorm.DB with the plugin installed.
func newEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	pg := testcluster.PostgresFor(t)
	return newEnvOn(t, pgCluster{pg}, pg, opts...)
}

// newMariaEnv is newEnv on the MariaDB primary and its replica.
func newMariaEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	return newEnvOn(t, mariaCluster{testcluster.MariaDBFor(t)}, nil, opts...)
}

// newEngineEnv is newEnv ("postgres") or newMariaEnv ("mariadb").
func newEngineEnv(t *testing.T, engine string, opts ...envOpt) *env {
	t.Helper()
	switch engine {
	case "mariadb":
		return newMariaEnv(t, opts...)
	case "postgres-pgbouncer":
		// The primary and replicas behind PgBouncer in transaction mode.
		return newBouncedEnv(t, testcluster.PoolTransaction, "simple_protocol", opts...)
	}
	return newEnv(t, opts...)
}

func newEnvOn(t *testing.T, c cluster, pg *testcluster.Postgres, opts ...envOpt) *env {
	t.Helper()
	e := &env{t: t, c: c, pg: pg, dbName: c.createDatabase(t)}

	setup, err := gorm.Open(c.primary(e.dbName), quiet())
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
	set := envSettings{cfg: plugin.Config{
		Store:        e.store,
		PollInterval: 5 * time.Millisecond,
		OnDecision: func(_ context.Context, d plugin.Decision) {
			e.mu.Lock()
			e.decisions = append(e.decisions, d)
			e.mu.Unlock()
		},
	}}
	for i := 0; i < e.c.replicas(); i++ {
		set.cfg.Replicas = append(set.cfg.Replicas, plugin.Replica{
			Name:      replicaName(i),
			Dialector: e.c.replica(i, e.dbName),
		})
	}
	for _, o := range opts {
		o(&set)
	}
	cfg := set.cfg
	primary := set.primary
	if primary == nil {
		primary = e.c.primary(e.dbName)
	}
	db, err := gorm.Open(primary, &gorm.Config{Logger: logger.Discard, PrepareStmt: set.prepareStmt})
	if err != nil {
		e.t.Fatal(err)
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
	e.mu.Lock()
	e.plugs = append(e.plugs, p)
	e.mu.Unlock()
	e.t.Cleanup(func() {
		p.Close()
		closeDB(db)
	})
	return db, p
}

// waitPollersCaughtUp waits, up to 5 s, until every plugin of e reports
// every replica usable with no lag at its last poll (the poller has seen
// the catch-up waitCaughtUp waited for). It does not fail: a plugin whose
// replicas cannot catch up (one paused, a primary writing on) leaves the
// test's own assertions to decide.
func (e *env) waitPollersCaughtUp() {
	e.mu.Lock()
	plugs := slices.Clone(e.plugs)
	e.mu.Unlock()
	waitPluginsCaughtUp(e.t, plugs)
}

// waitPluginsCaughtUp is waitPollersCaughtUp for plugs. A poll that
// began before the catch-up can report every replica caught up with a
// primary position read before the last write (lag 0 then too): each
// plugin must have finished two more polls since the call (the second
// began after it), unless it rests.
func waitPluginsCaughtUp(t testing.TB, plugs []*plugin.Plugin) {
	deadline := time.Now().Add(5 * time.Second)
	start := make([]float64, len(plugs))
	for i, p := range plugs {
		_, start[i] = pollerCaughtUp(p)
	}
	for i, p := range plugs {
		for {
			ok, polls := pollerCaughtUp(p)
			if ok && (polls < 0 || polls >= start[i]+2) {
				break
			}
			if time.Now().After(deadline) {
				t.Logf("a plugin's poller does not report its replicas caught up 5 s after they did")
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// pollerCaughtUp reads p's metrics: every replica up, lag 0; and the
// polls it finished (-1 while it rests: its gauges are its last poll's,
// and its next read wakes it and waits for a poll).
func pollerCaughtUp(p *plugin.Plugin) (bool, float64) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(freshreadprom.Plugin(p)); err != nil {
		return false, 0
	}
	mfs, err := reg.Gather()
	if err != nil {
		return false, 0
	}
	ups, lags, polls := 0, 0, 0.0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "freshread_poller_resting":
				if m.GetGauge().GetValue() == 1 {
					return true, -1
				}
			case "freshread_polls_total":
				polls = m.GetCounter().GetValue()
			case "freshread_replica_up":
				if m.GetGauge().GetValue() != 1 {
					return false, polls
				}
				ups++
			case "freshread_replica_replay_lag_bytes":
				if m.GetGauge().GetValue() != 0 {
					return false, polls
				}
				lags++
			}
		}
	}
	return ups > 0 && lags == ups, polls
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
	if err := e.c.waitCaughtUp(e.ctx()); err != nil {
		e.t.Fatal(err)
	}
}

// pauseAll pauses replay on every replica and resumes it when the test ends.
func (e *env) pauseAll() {
	e.t.Helper()
	for i := 0; i < e.c.replicas(); i++ {
		e.pause(i)
	}
}

func (e *env) pause(i int) {
	e.t.Helper()
	if err := e.c.pause(e.ctx(), i); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = e.c.resume(context.Background(), i) })
}

// resumeAll resumes replay and waits until every replica has caught up and
// the plugin's poller has seen it.
func (e *env) resumeAll() {
	e.t.Helper()
	for i := 0; i < e.c.replicas(); i++ {
		if err := e.c.resume(e.ctx(), i); err != nil {
			e.t.Fatal(err)
		}
	}
	e.waitCaughtUp()
	time.Sleep(50 * time.Millisecond) // several poll intervals (5ms)
	e.waitPollersCaughtUp()
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
	err := db.Model(&Item{}).Select("name, version, "+e.c.portExpr()+" AS port").Where("id = ?", id).Scan(&s).Error
	if err != nil {
		e.t.Fatalf("read item %d: %v", id, err)
	}
	return s
}

func (e *env) readOther(db *gorm.DB) served {
	e.t.Helper()
	var s served
	err := db.Model(&Other{}).Select("note AS name, 0 AS version, " + e.c.portExpr() + " AS port").Where("id = 1").Scan(&s).Error
	if err != nil {
		e.t.Fatalf("read other: %v", err)
	}
	return s
}

// waitReplicaServes waits until a read of an untouched table on db is
// served by a replica: the shared servers may still be coming back from an
// earlier test, and the poller must have seen them.
func (e *env) waitReplicaServes(db *gorm.DB) {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !e.isReplica(e.readOther(db).Port) {
		if time.Now().After(deadline) {
			e.t.Fatal("reads of an untouched table never reached a replica")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// eventuallyReplica reads with read until a replica serves it (the
// poller has seen the replicas catch up), failing the test after 15 s. It
// returns the replica's answer.
func (e *env) eventuallyReplica(read func() served, what string) served {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	got := read()
	for !e.isReplica(got.Port) {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: never served by a replica within 15 s: %+v (last decisions %+v)", what, got, e.lastDecisions())
		}
		time.Sleep(20 * time.Millisecond)
		got = read()
	}
	return got
}

// lastDecisions returns the plugin's last three routing decisions, for
// a failure's message.
func (e *env) lastDecisions() []plugin.Decision {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]plugin.Decision(nil), e.decisions[max(0, len(e.decisions)-3):]...)
}

func (e *env) isReplica(port int) bool {
	for i := 0; i < e.c.replicas(); i++ {
		if e.c.replicaPort(i) == port {
			return true
		}
	}
	return false
}

func (e *env) mustReplica(s served, what string) {
	e.t.Helper()
	if !e.isReplica(s.Port) {
		e.t.Fatalf("%s: served by port %d (primary is %d), want a replica (last decisions %+v)", what, s.Port, e.c.primaryPort(), e.lastDecisions())
	}
}

func (e *env) mustPrimary(s served, what string) {
	e.t.Helper()
	if s.Port != e.c.primaryPort() {
		e.t.Fatalf("%s: served by port %d, want the primary %d", what, s.Port, e.c.primaryPort())
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

// staleOnReplicas leaves item 1 "old" on every replica and "new" on the
// primary: created and replicated, replay paused (resumed when the test
// ends), then updated through the plugin.
func (e *env) staleOnReplicas() {
	e.t.Helper()
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		e.t.Fatal(err)
	}
	e.resumeAll()
	e.pauseAll()
	if err := setName(e.db, 1); err != nil {
		e.t.Fatal(err)
	}
}
