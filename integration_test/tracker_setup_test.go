package integration_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/registry"
	"github.com/freshread/freshread/tracker"
)

// trackerPassword is put in the tracker's DSN template (the test servers
// trust every local connection, so any password works): it must never
// reach Redis or the logs.
const trackerPassword = "Tr4cker-s3cret-pw"

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// trackerRun is an in-process tracker of one test database.
type trackerRun struct {
	t      *testing.T
	cfg    tracker.Config
	tr     *tracker.Tracker
	entry  registry.Entry
	rdb    *redis.Client
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan struct{}
}

// trackerEntry returns the registry entry of e's database, with its
// replicas named as newEnv's plugin names them and read through the
// primary's pg_stat_replication (application_name replica0, replica1).
func trackerEntry(e *env, storeName string) registry.Entry {
	u, err := url.Parse(e.pg.PrimaryDSN(e.dbName))
	if err != nil {
		e.t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	ent := registry.Entry{Host: u.Hostname(), Port: port, Database: e.dbName, Store: storeName}
	for i := 0; i < e.pg.Replicas(); i++ {
		ent.Replicas = append(ent.Replicas, registry.ReplicaEntry{Name: replicaName(i), Host: e.pg.Host(), Port: e.pg.ReplicaPort(i)})
	}
	return ent
}

// startTracker runs a tracker of e's database until the test ends (or
// stop is called).
func startTracker(e *env, storeName string, mode tracker.Mode, tweak ...func(*tracker.Config)) *trackerRun {
	e.t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testcluster.RedisFor(e.t).Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	e.t.Cleanup(func() { rdb.Close() })
	dsn, err := tracker.DSNTemplate("postgres://postgres:" + trackerPassword + "@{host}:{port}/{database}?sslmode=disable")
	if err != nil {
		e.t.Fatal(err)
	}
	logs := &syncBuffer{}
	ent := trackerEntry(e, storeName)
	cfg := tracker.Config{
		Redis:              rdb,
		DSN:                dsn,
		Databases:          []registry.Entry{ent},
		NoRegistry:         true,
		Mode:               mode,
		ReplayInterval:     20 * time.Millisecond,
		DependencyInterval: 200 * time.Millisecond,
		StatsInterval:      50 * time.Millisecond,
		StatusInterval:     100 * time.Millisecond,
		SlotPrefix:         "frt_",
		Logger:             slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, f := range tweak {
		f(&cfg)
	}
	run := &trackerRun{t: e.t, cfg: cfg, entry: ent, rdb: rdb, logs: logs}
	run.start()
	e.t.Cleanup(run.stop)
	return run
}

// startLogicalTracker starts a ModeLogical tracker of e's database, drops
// its replication slot when the test ends, and waits until it is ready.
func startLogicalTracker(e *env, storeName string) *trackerRun {
	e.t.Helper()
	run := startTracker(e, storeName, tracker.ModeLogical)
	e.t.Cleanup(func() { dropSlot(e, run) })
	waitReady(e.t, run.tr, 20*time.Second)
	return run
}

// start starts a new tracker (a new process, as far as the servers can
// tell) with the run's configuration.
func (r *trackerRun) start() {
	tr, err := tracker.New(r.cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.tr = tr
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		_ = r.tr.Run(ctx)
	}()
}

func (r *trackerRun) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	<-r.done
}

// waitGraph waits until the store holds a dependency graph with every
// table of want as a key, and returns it.
func waitGraph(t *testing.T, store lsnstore.DependentsStore, want ...string) lsnstore.Dependents {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := store.Dependents(context.Background())
		ok := err == nil
		for _, w := range want {
			if _, has := d.Graph[w]; !has {
				ok = false
			}
		}
		if ok {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("dependency graph not published in time: %+v (err %v); want keys %q", d, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readCol reads one text column of table through db with the serving
// port: `SELECT <expr> AS name, 0 AS version, inet_server_port() AS port
// FROM table WHERE where`.
func (e *env) readCol(db *gorm.DB, table, expr, where string, args ...any) served {
	e.t.Helper()
	var s served
	q := db.Table(table).Select(expr + " AS name, 0 AS version, inet_server_port() AS port")
	if where != "" {
		q = q.Where(where, args...)
	}
	if err := q.Scan(&s).Error; err != nil {
		e.t.Fatalf("read %s: %v", table, err)
	}
	return s
}

// exec runs statements on the primary outside the plugin.
func (e *env) exec(sql string) {
	e.t.Helper()
	db, err := gorm.Open(postgres.Open(e.pg.PrimaryDSN(e.dbName)), quiet())
	if err != nil {
		e.t.Fatal(err)
	}
	defer closeDB(db)
	if err := db.Exec(sql).Error; err != nil {
		e.t.Fatal(err)
	}
}

// newStoreWithPrefix returns a Redis store of database under prefix.
func newStoreWithPrefix(t *testing.T, rdb *redis.Client, database, prefix string) *lsnstore.Redis {
	t.Helper()
	return lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: database, Prefix: prefix, Timeout: 5 * time.Second})
}
