package integration_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/freshread/freshread"
	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// TestStoreFormatAtUse, on PostgreSQL and one Redis: db.Use records the
// process's format and release in the store; a store that a newer
// release, which does not run beside this format, used within its TTL
// makes db.Use fail with lsnstore.ErrStoreFormat naming both releases,
// before any replica is opened; a newer release that runs beside this
// format does not.
func TestStoreFormatAtUse(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testcluster.RedisFor(t).Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	opts := lsnstore.RedisOptions{Database: "format-" + t.Name() + time.Now().Format("150405.000000"), Timeout: time.Second}
	key := lsnstore.DefaultPrefix + "{" + opts.Database + "}-format"
	e := newEnv(t, withStore(lsnstore.NewRedis(rdb, opts)))

	members, err := rdb.ZRange(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := "1:1:" + freshread.Version(); len(members) != 1 || members[0] != want {
		t.Fatalf("after db.Use the format key holds %q, want [%q]", members, want)
	}

	use := func() error {
		db, err := gorm.Open(e.c.primary(e.dbName), quiet())
		if err != nil {
			t.Fatal(err)
		}
		defer closeDB(db)
		cfg := plugin.Config{Store: lsnstore.NewRedis(rdb, opts)}
		for i := 0; i < e.c.replicas(); i++ {
			cfg.Replicas = append(cfg.Replicas, plugin.Replica{Name: replicaName(i), Dialector: e.c.replica(i, e.dbName)})
		}
		p := plugin.New(cfg)
		err = db.Use(p)
		if err == nil {
			p.Close()
		}
		return err
	}
	in := float64(time.Now().Add(time.Minute).UnixMilli())
	if err := rdb.ZAdd(ctx, key, redis.Z{Score: in, Member: "2:2:9.0.0"}).Err(); err != nil {
		t.Fatal(err)
	}
	err = use()
	if !errors.Is(err, lsnstore.ErrStoreFormat) {
		t.Fatalf("db.Use beside format 2 of a release that does not run beside format 1 = %v, want lsnstore.ErrStoreFormat", err)
	}
	for _, s := range []string{"freshread 9.0.0 (format 2)", "freshread " + freshread.Version() + " (format 1)", "run 9.0.0 or a later release here too", key} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("db.Use's error does not say %q: %v", s, err)
		}
	}
	t.Logf("refused: %v", err)

	if err := rdb.ZRem(ctx, key, "2:2:9.0.0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAdd(ctx, key, redis.Z{Score: in, Member: "2:1:0.9.0"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := use(); err != nil {
		t.Fatalf("db.Use beside format 2 of a release that runs beside format 1: %v", err)
	}
}
