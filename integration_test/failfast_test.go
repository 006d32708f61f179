package integration_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// TestRedisStoreChecksAtUse: db.Use refuses a Redis store without
// RedisOptions.Database (errors.Is lsnstore.ErrNoDatabase), and warns once,
// naming the option, about a client without ContextTimeoutEnabled. Both
// engines.
func TestRedisStoreChecksAtUse(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) { redisStoreChecksAtUse(t, engine) })
	}
}

func redisStoreChecksAtUse(t *testing.T, engine string) {
	e := newEngineEnv(t, engine)
	r := testcluster.RedisFor(t)
	use := func(rdb *redis.Client, opts lsnstore.RedisOptions) (string, error) {
		db, err := gorm.Open(e.c.primary(e.dbName), quiet())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeDB(db) })
		var logs bytes.Buffer
		p := plugin.New(plugin.Config{Store: lsnstore.NewRedis(rdb, opts), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		err = db.Use(p)
		if err == nil {
			t.Cleanup(func() { p.Close() })
		}
		return logs.String(), err
	}
	with := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	without := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer with.Close()
	defer without.Close()

	_, err := use(with, lsnstore.RedisOptions{})
	if !errors.Is(err, lsnstore.ErrNoDatabase) || !plugin.IsConfig(err) {
		t.Fatalf("db.Use with an empty RedisOptions.Database = %v; want ErrConfig wrapping lsnstore.ErrNoDatabase", err)
	}
	logs, err := use(without, lsnstore.RedisOptions{Database: "failfast-" + t.Name()})
	if err != nil {
		t.Fatalf("db.Use with a client without ContextTimeoutEnabled: %v", err)
	}
	if n := strings.Count(logs, "option=ContextTimeoutEnabled"); n != 1 {
		t.Fatalf("a client without ContextTimeoutEnabled: %d warnings naming the option, want 1:\n%s", n, logs)
	}
	logs, err = use(with, lsnstore.RedisOptions{Database: "failfast-" + t.Name()})
	if err != nil || strings.Contains(logs, "ContextTimeoutEnabled") {
		t.Fatalf("db.Use with ContextTimeoutEnabled: %v, logs:\n%s", err, logs)
	}
}

// TestUnreachableReplicaAtStart: a replica that does not answer at db.Use
// is said once at WARN, with its name and the cause but not its DSN's
// password, and a read no replica can serve is no-replica (not lagging),
// with the in-memory store (sequential lookup) and with Redis (overlapped).
// Both engines.
func TestUnreachableReplicaAtStart(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) { unreachableReplicaAtStart(t, engine) })
	}
}

func unreachableReplicaAtStart(t *testing.T, engine string) {
	e := newEngineEnv(t, engine)
	// Nothing listens on port 1; the password must not reach the log.
	gone := postgres.Open("postgres://app:s3cr3t-pw@127.0.0.1:1/x?sslmode=disable&connect_timeout=1")
	if engine == "mariadb" {
		gone = mysql.Open("app:s3cr3t-pw@tcp(127.0.0.1:1)/x?timeout=1s")
	}
	redisStore, _ := newRedisStore(t, "gone-"+t.Name())
	for _, store := range []lsnstore.Store{lsnstore.NewMemory(), redisStore} {
		db, err := gorm.Open(e.c.primary(e.dbName), quiet())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeDB(db) })
		var (
			logs    bytes.Buffer
			reasons []plugin.Reason
		)
		p := plugin.New(plugin.Config{
			Replicas: []plugin.Replica{{Name: "gone", Dialector: gone}},
			Store:    store,
			Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
			OnDecision: func(_ context.Context, d plugin.Decision) {
				reasons = append(reasons, d.Reason)
			},
		})
		if err := db.Use(p); err != nil {
			t.Fatalf("%T: an unreachable replica at start: %v", store, err)
		}
		t.Cleanup(func() { p.Close() })
		if got := e.readOther(db); got.Port != e.c.primaryPort() {
			t.Fatalf("%T: read with the only replica down served by %d", store, got.Port)
		}
		if len(reasons) != 1 || reasons[0] != plugin.ReasonNoReplica {
			t.Fatalf("%T: reasons %v with every replica down, want [%s]", store, reasons, plugin.ReasonNoReplica)
		}
		e.readOther(db) // more polls and reads say nothing more
		log := logs.String()
		if n := strings.Count(log, "replica unreachable at start"); n != 1 || !strings.Contains(log, "level=WARN") || !strings.Contains(log, "replica=gone") {
			t.Fatalf("%T: unreachable replica said %d times, want once at WARN naming it:\n%s", store, n, log)
		}
		if strings.Contains(log, "s3cr3t-pw") {
			t.Fatalf("%T: the log shows the replica's password:\n%s", store, log)
		}
	}
}
