package plugin

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/lsnstore"
)

// TestStoreWithoutDatabaseRefused: a Redis store without
// RedisOptions.Database is a configuration error at db.Use, checkable
// with errors.Is, naming the field and the remedy.
func TestStoreWithoutDatabaseRefused(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}) // never contacted
	defer rdb.Close()
	err := New(Config{Store: lsnstore.NewRedis(rdb, lsnstore.RedisOptions{})}).validate("postgres")
	if !errors.Is(err, ErrConfig) || !errors.Is(err, lsnstore.ErrNoDatabase) {
		t.Fatalf("validate with an empty Database = %v; want ErrConfig and lsnstore.ErrNoDatabase", err)
	}
	if !strings.Contains(err.Error(), "RedisOptions.Database is empty: set it") {
		t.Fatalf("the error names neither the field nor the remedy: %v", err)
	}
	if err := New(Config{Store: lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: "d"})}).validate("postgres"); err != nil {
		t.Fatalf("validate with a Database: %v", err)
	}
}

// TestStoreClientWithoutContextTimeoutsWarned: a store client without
// ContextTimeoutEnabled is warned about once, naming the option; a client
// with it is not.
func TestStoreClientWithoutContextTimeoutsWarned(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: enabled}) // never contacted
		defer rdb.Close()
		var logs bytes.Buffer
		p := New(Config{Store: lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: "d"}), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		p.warnStoreClient()
		got := strings.Count(logs.String(), "level=WARN")
		if want := map[bool]int{false: 1, true: 0}[enabled]; got != want || (want == 1 && !strings.Contains(logs.String(), "ContextTimeoutEnabled: true")) {
			t.Errorf("ContextTimeoutEnabled %v: %d warnings, want %d:\n%s", enabled, got, want, logs.String())
		}
	}
}
