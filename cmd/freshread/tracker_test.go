package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/tracker"
)

func TestMain(m *testing.M) { os.Exit(testcluster.Run(m, testcluster.Spec{PostgresReplicas: 1})) }

func TestTrackerHelp(t *testing.T) {
	t.Setenv("FRESHREAD_PG_DSN_TEMPLATE", "postgres://u:help-s3cret@{host}:{port}/{database}")
	t.Setenv("FRESHREAD_REDIS_URL", "redis://:redis-s3cret@127.0.0.1:1/0")
	var out, errb bytes.Buffer
	if code := dispatch([]string{"tracker", "--help"}, nil, &out, &errb); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	help := errb.String()
	for _, want := range []string{"FRESHREAD_REDIS_URL", "FRESHREAD_PG_DSN_TEMPLATE", "--mode", "-drop-slot", "/readyz", "Quick start"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
	if strings.Contains(help, "s3cret") {
		t.Error("--help prints a secret from the environment")
	}
}

func TestTrackerFlagErrors(t *testing.T) {
	t.Setenv("FRESHREAD_PG_DSN_TEMPLATE", "")
	t.Setenv("FRESHREAD_REDIS_URL", "")
	for _, args := range [][]string{
		{"tracker"}, // required settings missing
		{"tracker", "--redis-url", "redis://127.0.0.1:1", "--dsn-template", "postgres://x@{host}:{port}/{database}", "--mode", "bogus"},
		{"tracker", "--redis-url", "redis://127.0.0.1:1", "--dsn-template", "postgres://x@{host}:{port}/{database}", "--database", "nohost"},
		{"tracker", "--redis-url", "redis://127.0.0.1:1", "--dsn-template", "postgres://x@{host}:{port}/{database}", "--log-format", "xml"},
	} {
		var out, errb bytes.Buffer
		if code := dispatch(args, nil, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d (%s); want 2", args, code, errb.String())
		}
	}
}

// syncBuf is a concurrency-safe log sink.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestTrackerDaemon runs the daemon against real servers: --print-graph,
// then the daemon with /readyz and /metrics, stopped by SIGTERM; on a
// single Redis, a Redis Cluster and Sentinel (--redis-mode), each time
// checking that the graph is in the deployment's store.
func TestTrackerDaemon(t *testing.T) {
	seeds := func(addrs []string, query string) string {
		return "redis://" + addrs[0] + "?" + query + "addr=" + strings.Join(addrs[1:], "&addr=")
	}
	for _, d := range []struct {
		name string
		open func(t *testing.T) (mode, url string, rdb redis.UniversalClient)
	}{
		{"Standalone", func(t *testing.T) (string, string, redis.UniversalClient) {
			rs := testcluster.RedisFor(t)
			rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
			t.Cleanup(func() { rdb.Close() })
			return "single", "redis://" + rs.Addr() + "/0", rdb
		}},
		{"Cluster", func(t *testing.T) (string, string, redis.UniversalClient) {
			c := testcluster.RedisClusterFor(t)
			return "cluster", seeds(c.Addrs(), ""), c.Client(t)
		}},
		{"Sentinel", func(t *testing.T) (string, string, redis.UniversalClient) {
			s := testcluster.RedisSentinelFor(t)
			rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testcluster.SentinelMaster, SentinelAddrs: s.SentinelAddrs()})
			t.Cleanup(func() { rdb.Close() })
			return "sentinel", seeds(s.SentinelAddrs(), "master_name="+testcluster.SentinelMaster+"&"), rdb
		}},
	} {
		t.Run(d.name, func(t *testing.T) {
			mode, url, rdb := d.open(t)
			checkTrackerDaemon(t, mode, url, rdb)
		})
	}
}

func checkTrackerDaemon(t *testing.T, redisMode, redisURL string, rdb redis.UniversalClient) {
	pg := testcluster.PostgresFor(t)
	db := pg.CreateDatabase(t)
	u, _ := url.Parse(pg.PrimaryDSN(db))
	setup := []string{
		"CREATE TABLE a (id int PRIMARY KEY)", "CREATE TABLE b (a_id int)",
		"CREATE FUNCTION a_trg() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO b VALUES (NEW.id); RETURN NEW; END $$",
		"CREATE TRIGGER a_trg AFTER INSERT ON a FOR EACH ROW EXECUTE FUNCTION a_trg()",
	}
	if err := execAll(pg.PrimaryDSN(db), setup); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FRESHREAD_REDIS_URL", redisURL)
	t.Setenv("FRESHREAD_REDIS_MODE", redisMode)
	t.Setenv("FRESHREAD_PG_DSN_TEMPLATE", "postgres://postgres:daemon-s3cret@{host}:{port}/{database}?sslmode=disable")
	database := u.Host + "/" + db

	var out, errb bytes.Buffer
	if code := dispatch([]string{"tracker", "--no-registry", "--database", database, "--print-graph"}, nil, &out, &errb); code != 0 {
		t.Fatalf("--print-graph exit %d: %s", code, errb.String())
	}
	var graphs map[string]struct {
		Dependents map[string][]string `json:"dependents"`
	}
	if err := json.Unmarshal(out.Bytes(), &graphs); err != nil {
		t.Fatalf("--print-graph output: %v\n%s", err, out.String())
	}
	if g := graphs[database].Dependents["a"]; len(g) != 1 || g[0] != "b" {
		t.Fatalf("--print-graph: %s", out.String())
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logs := &syncBuf{}
	done := make(chan int, 1)
	go func() {
		done <- dispatch([]string{"tracker", "--no-registry", "--database", database, "--listen", addr,
			"--log-format", "json", "--replay-interval", "20ms"}, nil, io.Discard, logs)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not ready: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The graph is published by its own loop, soon after readiness.
	want := `freshread_tracker_dependency_edges{database="` + database + `"} 1`
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics: no %s:\n%s", want, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The daemon published the graph in the deployment's store (the
	// database's name is its store name).
	store := lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: db, Timeout: 5 * time.Second})
	deps, err := store.Dependents(context.Background())
	if err != nil || len(deps.Graph["a"]) != 1 || deps.Graph["a"][0] != "b" {
		t.Fatalf("the graph in the %s store: %+v (err %v)", redisMode, deps, err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after SIGTERM\n%s", code, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("daemon did not stop on SIGTERM")
	}
	l := logs.String()
	if !strings.Contains(l, `"msg":"stopped"`) || strings.Contains(l, "daemon-s3cret") {
		t.Fatalf("logs (want JSON, a clean stop, no password):\n%s", l)
	}
}

func execAll(dsn string, stmts []string) error {
	c, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, s := range stmts {
		if _, err := c.Exec(s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// TestTrackerDropSlot: `freshread tracker --drop-slot` drops the
// replication slot of every tracked database (a slot left behind keeps WAL
// on the primary without bound) and exits.
func TestTrackerDropSlot(t *testing.T) {
	pg := testcluster.PostgresFor(t)
	rs := testcluster.RedisFor(t)
	db := pg.CreateDatabase(t)
	u, _ := url.Parse(pg.PrimaryDSN(db))
	slot := tracker.SlotName("freshread_", db)
	if err := execAll(pg.PrimaryDSN(db), []string{
		"SELECT pg_create_logical_replication_slot('" + slot + "', 'pgoutput')",
	}); err != nil {
		t.Fatal(err)
	}
	countSlots := func() int {
		c, err := sql.Open("pgx", pg.PrimaryDSN(db))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var n int
		if err := c.QueryRow("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if countSlots() != 1 {
		t.Fatal("slot not created")
	}
	t.Setenv("FRESHREAD_REDIS_URL", "redis://"+rs.Addr()+"/0")
	t.Setenv("FRESHREAD_PG_DSN_TEMPLATE", "postgres://postgres@{host}:{port}/{database}?sslmode=disable")
	var out, errb bytes.Buffer
	if code := dispatch([]string{"tracker", "--no-registry", "--database", u.Host + "/" + db, "--drop-slot"}, nil, &out, &errb); code != 0 {
		t.Fatalf("--drop-slot exit %d: %s", code, errb.String())
	}
	if n := countSlots(); n != 0 {
		t.Fatalf("slot %s still exists after --drop-slot", slot)
	}
}
