package integration_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/plugin/dbresolver"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// TestTwoProcessesShareRedis: a write through one *gorm.DB (its own plugin)
// makes the other's next read of that table go to the primary.
func TestTwoProcessesShareRedis(t *testing.T) {
	store, _ := newRedisStore(t, "shared-"+t.Name())
	e := newEnv(t, withStore(store))
	other, _ := e.open(withStore(store))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.mustReplica(e.readItem(other, 1), "before")
	e.pauseAll()
	if err := setName(e.db, 1); err != nil {
		t.Fatal(err)
	}
	got := e.readItem(other, 1)
	if got.Name != "new" {
		t.Fatalf("STALE READ in the second process: %+v", got)
	}
	e.mustPrimary(got, "second process")
	e.mustReplica(e.readOther(other), "second process, untouched table")
}

// TestOnePausedReplica: with one replica paused, reads of the written table
// go to the other replica, never to the paused one.
func TestOnePausedReplica(t *testing.T) {
	e := newEnv(t)
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.pause(0)
	if err := setName(e.db, 1); err != nil {
		t.Fatal(err)
	}
	// Wait until the running replica has replayed the write and the poller saw it.
	e.waitReplicaHas(1, 1, "new")
	for i := 0; i < 30; i++ {
		got := e.readItem(e.db, 1)
		if got.Name != "new" {
			t.Fatalf("STALE READ from port %d: %+v", got.Port, got)
		}
		if got.Port == e.pg.ReplicaPort(0) {
			t.Fatalf("read served by the paused replica")
		}
		if got.Port != e.pg.ReplicaPort(1) {
			t.Fatalf("read %d served by port %d, want the running replica %d", i, got.Port, e.pg.ReplicaPort(1))
		}
	}
}

// waitReplicaHas waits until replica i serves name for item id directly and
// the poller has had time to see it.
func (e *env) waitReplicaHas(i int, id uint, name string) {
	e.t.Helper()
	rdb, err := gorm.Open(postgres.Open(e.pg.ReplicaDSN(i, e.dbName)), quiet())
	if err != nil {
		e.t.Fatal(err)
	}
	defer closeDB(rdb)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got string
		rdb.Model(&Item{}).Select("name").Where("id = ?", id).Scan(&got)
		if got == name {
			time.Sleep(50 * time.Millisecond)
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("replica %d never showed %q", i, name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRedisOutage: Redis stopped in the middle: no stale read, no error,
// reads on the primary; Redis back: replicas again.
func TestRedisOutage(t *testing.T) {
	store, r := newRedisStore(t, "outage-"+t.Name())
	e := newEnv(t, withStore(store))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.mustReplica(e.readItem(e.db, 1), "before the outage")

	e.pauseAll()
	if err := r.Stop(e.ctx()); err != nil {
		if errors.Is(err, errUnsupported) {
			t.Skip("Redis provider cannot stop")
		}
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = r.Start(context.Background())
		}
	})
	// The write succeeds (its publish fails) and is not reported as failed.
	if err := setName(e.db, 1); err != nil {
		t.Fatalf("write during the outage: %v", err)
	}
	for i := 0; i < 10; i++ {
		got := e.readItem(e.db, 1)
		if got.Name != "new" {
			t.Fatalf("STALE READ during the outage: %+v", got)
		}
		e.mustPrimary(got, "during the outage")
		e.mustPrimary(e.readOther(e.db), "untouched table during the outage")
	}
	if err := r.Start(e.ctx()); err != nil {
		t.Fatal(err)
	}
	stopped = false
	e.resumeAll()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := e.readItem(e.db, 1)
		if got.Name != "new" {
			t.Fatalf("STALE READ after the outage: %+v", got)
		}
		if e.isReplica(got.Port) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("reads never went back to the replicas after Redis came back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The write made during the outage was published once Redis was back.
	pos, err := store.WritePosition(e.ctx(), []string{"items"})
	if err != nil || pos.IsZero() {
		t.Fatalf("position of items after the outage: %v, %v", pos, err)
	}
}

// TestReplicaStopped: a stopped replica makes reads fall back (the other
// replica or the primary) without errors.
func TestReplicaStopped(t *testing.T) {
	e := newEnv(t)
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	for i := 0; i < e.pg.Replicas(); i++ {
		if err := e.pg.StopReplica(e.ctx(), i); err != nil {
			if errors.Is(err, errUnsupported) {
				t.Skip("provider cannot stop replicas")
			}
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.pg.StartReplica(context.Background(), i) })
	}
	for i := 0; i < 20; i++ {
		got := e.readItem(e.db, 1)
		if got.Name != "old" {
			t.Fatalf("read %d with replicas down: %+v", i, got)
		}
		e.mustPrimary(got, "replicas down")
	}
	if err := e.pg.StartReplica(e.ctx(), 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !e.isReplica(e.readItem(e.db, 1).Port) {
		if time.Now().After(deadline) {
			t.Fatal("reads never returned to the restarted replica")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHintsLockingAndTransactions: dbresolver.Write and locking reads and
// reads inside a transaction go to the primary; dbresolver.Read goes to a
// replica even when it is stale (explicitly asked for).
func TestHintsLockingAndTransactions(t *testing.T) {
	e := newEnv(t)
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.mustPrimary(e.readItem(e.db.Clauses(dbresolver.Write), 1), "dbresolver.Write")
	e.mustPrimary(e.readItem(e.db.Clauses(clause.Locking{Strength: "UPDATE"}), 1), "FOR UPDATE")
	_ = e.db.Transaction(func(tx *gorm.DB) error {
		e.mustPrimary(e.readOther(tx), "inside a transaction")
		return nil
	})
	e.pauseAll()
	if err := setName(e.db, 1); err != nil {
		t.Fatal(err)
	}
	got := e.readItem(e.db.Clauses(dbresolver.Read), 1)
	e.mustReplica(got, "dbresolver.Read")
	if got.Name != "old" {
		t.Fatalf("dbresolver.Read on a paused replica returned %q; the test expects the stale value it asked for", got.Name)
	}
	if got := e.readItem(e.db, 1); got.Name != "new" {
		t.Fatalf("STALE READ without hint: %+v", got)
	}
	strong := e.db.WithContext(plugin.WithConsistency(context.Background(), plugin.Strong))
	e.mustPrimary(e.readOther(strong), "Strong consistency")
	eventual := e.db.WithContext(plugin.WithConsistency(context.Background(), plugin.Eventual))
	if got := e.readItem(eventual, 1); !e.isReplica(got.Port) || got.Name != "old" {
		t.Fatalf("Eventual consistency on paused replicas: %+v, want the replica's old value", got)
	}
}

// TestSessionConsistency: with Session consistency only the caller's own
// writes count: a write by another caller does not move this caller's
// reads off the replicas (they may be stale for it), its own write does.
func TestSessionConsistency(t *testing.T) {
	e := newEnv(t, withConfig(func(c *plugin.Config) { c.Consistency = plugin.Session }))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.pauseAll()
	mine := plugin.WithSession(context.Background())
	theirs := plugin.WithSession(context.Background())
	if err := setName(e.db.WithContext(theirs), 1); err != nil {
		t.Fatal(err)
	}
	got := e.readItem(e.db.WithContext(mine), 1)
	e.mustReplica(got, "someone else's write under Session consistency")
	got = e.readItem(e.db.WithContext(theirs), 1)
	if got.Name != "new" {
		t.Fatalf("STALE READ of the session's own write: %+v", got)
	}
	e.mustPrimary(got, "own write")
	// The token carries the position to a new context.
	s, err := plugin.ParseToken(plugin.SessionFrom(theirs).Token())
	if err != nil {
		t.Fatal(err)
	}
	got = e.readItem(e.db.WithContext(plugin.ContextWithSession(context.Background(), s)), 1)
	if got.Name != "new" {
		t.Fatalf("STALE READ through a token: %+v", got)
	}
}

// TestMiddlewareCookie: a POST then a GET with the session cookie sees the
// write, with replay paused, under Session consistency.
func TestMiddlewareCookie(t *testing.T) {
	e := newEnv(t, withConfig(func(c *plugin.Config) { c.Consistency = plugin.Session }))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.pauseAll()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /items/1", func(w http.ResponseWriter, r *http.Request) {
		if err := setName(e.db.WithContext(r.Context()), 1); err != nil {
			http.Error(w, err.Error(), 500)
		}
	})
	mux.HandleFunc("GET /items/1", func(w http.ResponseWriter, r *http.Request) {
		got := e.readItem(e.db.WithContext(r.Context()), 1)
		w.Write([]byte(got.Name + " " + strconv.Itoa(got.Port)))
	})
	srv := httptest.NewServer(plugin.Middleware(plugin.MiddlewareConfig{})(mux))
	defer srv.Close()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	resp, err := c.Post(srv.URL+"/items/1", "text/plain", nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = c.Get(srv.URL + "/items/1")
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 64)
	n, _ := resp.Body.Read(body)
	resp.Body.Close()
	fields := strings.Fields(string(body[:n]))
	if len(fields) != 2 || fields[0] != "new" || fields[1] != strconv.Itoa(e.pg.PrimaryPort()) {
		t.Fatalf("GET after POST: %q, want new from the primary", body[:n])
	}
	// A client without the cookie is not pinned to the primary.
	resp, err = http.Get(srv.URL + "/items/1")
	if err != nil {
		t.Fatal(err)
	}
	n, _ = resp.Body.Read(body)
	resp.Body.Close()
	if fields := strings.Fields(string(body[:n])); len(fields) != 2 || !e.isReplica(atoi(fields[1])) {
		t.Fatalf("GET without the cookie: %q, want a replica", body[:n])
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// TestConfigErrors: bad configuration is a clear error from db.Use.
func TestConfigErrors(t *testing.T) {
	e := newEnv(t)
	open := func() *gorm.DB {
		db, err := gorm.Open(postgres.Open(e.pg.PrimaryDSN(e.dbName)), quiet())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeDB(db) })
		return db
	}
	err := open().Use(plugin.New(plugin.Config{Replicas: []plugin.Replica{{Name: "p", Dialector: postgres.Open(e.pg.PrimaryDSN(e.dbName))}}}))
	if !errors.Is(err, plugin.ErrNotReplica) {
		t.Fatalf("replica DSN pointing at the primary: %v, want ErrNotReplica", err)
	}
	r0 := postgres.Open(e.pg.ReplicaDSN(0, e.dbName))
	err = open().Use(plugin.New(plugin.Config{Replicas: []plugin.Replica{{Name: "a", Dialector: r0}, {Name: "a", Dialector: r0}}}))
	if !plugin.IsConfig(err) || !strings.Contains(err.Error(), `duplicate replica name "a"`) {
		t.Fatalf("duplicate names: %v", err)
	}
	err = open().Use(plugin.New(plugin.Config{Replicas: []plugin.Replica{{Name: "m", Dialector: mysql.Open("u:secret@tcp(127.0.0.1:1)/x")}}}))
	if !plugin.IsConfig(err) || strings.Contains(err.Error(), "secret") {
		t.Fatalf("mysql replica: %v", err)
	}
	db := open()
	if err := db.Use(dbresolver.Register(dbresolver.Config{})); err != nil {
		t.Fatal(err)
	}
	if err := db.Use(plugin.New(plugin.Config{})); !errors.Is(err, plugin.ErrDBResolver) {
		t.Fatalf("with dbresolver installed: %v", err)
	}
	// An unreachable replica is not fatal: it starts down, reads go to the primary.
	db = open()
	p := plugin.New(plugin.Config{Replicas: []plugin.Replica{{Name: "gone", Dialector: postgres.Open("postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=1")}}})
	if err := db.Use(p); err != nil {
		t.Fatalf("unreachable replica at start: %v", err)
	}
	defer p.Close()
	if got := e.readOther(db); got.Port != e.pg.PrimaryPort() || got.Name != "untouched" {
		t.Fatalf("read with the only replica down: %+v", got)
	}
}

// TestMaxLagLongerThanTTLRefused: a MaxLag at or above the Redis key TTL
// could use a replica that misses an expired write position: refused.
func TestMaxLagLongerThanTTLRefused(t *testing.T) {
	store, _ := newRedisStore(t, "ttl-"+t.Name())
	e := newEnv(t)
	db, err := gorm.Open(postgres.Open(e.pg.PrimaryDSN(e.dbName)), quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB(db)
	err = db.Use(plugin.New(plugin.Config{Store: store, MaxLag: time.Hour}))
	if !plugin.IsConfig(err) || !strings.Contains(err.Error(), "MaxLag") {
		t.Fatalf("MaxLag of an hour with a 10-minute TTL: %v", err)
	}
}

// TestPreloadRoutedOnItsOwn: a preload is its own statement: with parts
// just written and replay paused, the items query may use a replica while
// the parts preload goes to the primary, and the result holds the new part.
func TestPreloadRoutedOnItsOwn(t *testing.T) {
	e := newEnv(t)
	if err := e.db.Create(&Item{ID: 1, Name: "old", Parts: []Part{{Label: "p1"}}}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.pauseAll()
	if err := e.db.Create(&Part{ItemID: 1, Label: "p2"}).Error; err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.decisions = nil
	e.mu.Unlock()
	var it Item
	if err := e.db.Preload("Parts").First(&it, 1).Error; err != nil {
		t.Fatal(err)
	}
	if len(it.Parts) != 2 {
		t.Fatalf("STALE READ through a preload: %d parts, want 2", len(it.Parts))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var items, parts *plugin.Decision
	for i := range e.decisions {
		d := &e.decisions[i]
		if len(d.Tables) == 1 && d.Tables[0] == "items" {
			items = d
		}
		if len(d.Tables) == 1 && d.Tables[0] == "parts" {
			parts = d
		}
	}
	if items == nil || parts == nil {
		t.Fatalf("decisions %+v: want one for items and one for parts", e.decisions)
	}
	if items.Target != plugin.ReplicaTarget || parts.Target != plugin.Primary {
		t.Fatalf("items -> %v (%s), parts -> %v (%s); want replica and primary", items.Target, items.Reason, parts.Target, parts.Reason)
	}
}

// TestConnectionStaysPinned: inside db.Connection every statement runs on
// the one connection (session state set there is visible), not on a
// replica.
func TestConnectionStaysPinned(t *testing.T) {
	e := newEnv(t)
	e.resumeAll()
	err := e.db.Connection(func(tx *gorm.DB) error {
		tx = tx.Session(&gorm.Session{}) // each chain below starts fresh, on the pinned connection
		if err := tx.Exec("SET application_name = 'pinned-test'").Error; err != nil {
			return err
		}
		var s served
		if err := tx.Raw("SELECT current_setting('application_name') AS name, inet_server_port() AS port").Scan(&s).Error; err != nil {
			return err
		}
		if s.Name != "pinned-test" {
			t.Fatalf("session setting lost: %+v (the read left the pinned connection)", s)
		}
		got := e.readOther(tx)
		e.mustPrimary(got, "GORM read inside db.Connection")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMiddlewareTwoProcessesRedisDeployments: behind the middleware, a
// POST served by one process and the GET after it, with the session
// cookie, served by another, their plugins sharing a store on a single
// Redis, a Cluster or Sentinel: the GET sees the write (replay paused;
// every read of the session waits for its write, so the primary), and a
// request without the cookie still reads an untouched table from a
// replica.
func TestMiddlewareTwoProcessesRedisDeployments(t *testing.T) {
	for _, d := range testcluster.RedisDeployments() {
		t.Run(d.Name, func(t *testing.T) {
			store := lsnstore.NewRedis(d.Client(t), lsnstore.RedisOptions{Database: "mw-" + t.Name(), Timeout: time.Second})
			e := newEnv(t, withStore(store))
			other, _ := e.open(withStore(store))
			if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
				t.Fatal(err)
			}
			e.resumeAll()
			e.waitReplicaServes(other)
			e.pauseAll()
			writer := httptest.NewServer(plugin.Middleware(plugin.MiddlewareConfig{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := setName(e.db.WithContext(r.Context()), 1); err != nil {
					http.Error(w, err.Error(), 500)
				}
			})))
			defer writer.Close()
			reader := httptest.NewServer(plugin.Middleware(plugin.MiddlewareConfig{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got := e.readItem(other.WithContext(r.Context()), 1)
				untouched := e.readOther(other.WithContext(r.Context()))
				fmt.Fprintf(w, "%s %d %d", got.Name, got.Port, untouched.Port)
			})))
			defer reader.Close()
			jar, _ := cookiejar.New(nil)
			c := &http.Client{Jar: jar}
			resp, err := c.Post(writer.URL+"/items/1", "text/plain", nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("POST: %v %v", resp, err)
			}
			resp.Body.Close()
			// Both servers are on 127.0.0.1: the cookie jar sends the
			// writer's cookie to the reader as well.
			resp, err = c.Get(reader.URL + "/items/1")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			f := strings.Fields(string(body))
			if len(f) != 3 || f[0] != "new" || atoi(f[1]) != e.pg.PrimaryPort() {
				t.Fatalf("GET in the other process after the POST: %q, want new from the primary", body)
			}
			if atoi(f[2]) != e.pg.PrimaryPort() {
				t.Fatalf("GET in the other process, untouched table in the session: %q, want the primary", body)
			}
			resp, err = http.Get(reader.URL + "/items/1")
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if f := strings.Fields(string(body)); len(f) != 3 || f[0] != "new" || atoi(f[1]) != e.pg.PrimaryPort() || !e.isReplica(atoi(f[2])) {
				t.Fatalf("GET without the cookie: %q, want new from the primary (the store) and the untouched table from a replica", body)
			}
		})
	}
}
