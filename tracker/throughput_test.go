package tracker

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/registry"
)

// TestDecodeThroughput measures how many committed transactions per second
// ModeLogical decodes and publishes: it commits a backlog of single-row
// transactions (8 tables in rotation) while the tracker is stopped, then
// starts it and times the drain of the slot. Run it with
//
//	FRESHREAD_TRACKER_THROUGHPUT=20000 go test -run TestDecodeThroughput -v ./tracker/
func TestDecodeThroughput(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("FRESHREAD_TRACKER_THROUGHPUT"))
	if n <= 0 {
		t.Skip("set FRESHREAD_TRACKER_THROUGHPUT=<transactions> to measure")
	}
	pg := testcluster.PostgresFor(t)
	rs := testcluster.RedisFor(t)
	db := pg.CreateDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pg.PrimaryDSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const tables = 8
	for i := 0; i < tables; i++ {
		if _, err := pool.Exec(ctx, fmt.Sprintf("CREATE TABLE t%d (id int)", i)); err != nil {
			t.Fatal(err)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	u, _ := url.Parse(pg.PrimaryDSN(db))
	port, _ := strconv.Atoi(u.Port())
	entry := registry.Entry{Host: u.Hostname(), Port: port, Database: db, Store: "tp-" + db}
	dsn, _ := DSNTemplate("postgres://postgres@{host}:{port}/{database}?sslmode=disable")
	cfg := Config{Redis: rdb, DSN: dsn, Databases: []registry.Entry{entry}, NoRegistry: true, Mode: ModeLogical,
		SlotPrefix: "tp_", StatusInterval: 100 * time.Millisecond, DependencyInterval: time.Hour,
		Logger: slog.New(slog.DiscardHandler)}
	run := func() (context.CancelFunc, chan struct{}) {
		tr, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); tr.Run(c) }()
		deadline := time.Now().Add(20 * time.Second)
		for tr.Ready(ctx, time.Second) != nil {
			if time.Now().After(deadline) {
				t.Fatal("tracker not ready")
			}
			time.Sleep(20 * time.Millisecond)
		}
		return cancel, done
	}
	t.Cleanup(func() {
		pool.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", SlotName("tp_", db))
	})
	// Create the slot, then stop the tracker.
	cancel, done := run()
	cancel()
	<-done

	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := next.Add(1)
				if k > int64(n) {
					return
				}
				if _, err := pool.Exec(ctx, fmt.Sprintf("INSERT INTO t%d VALUES ($1)", k%tables), k); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	writeTook := time.Since(start)
	var s string
	if err := pool.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	// Every table's last write ends at or after beforeLast minus the
	// eight last transactions; write each once more to pin it.
	beforeLast, _ := lsnstore.ParseLSN(s)
	for i := 0; i < tables; i++ {
		if _, err := pool.Exec(ctx, fmt.Sprintf("INSERT INTO t%d VALUES (0)", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := pool.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	final, _ := lsnstore.ParseLSN(s)
	store := lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: entry.Store, Timeout: time.Second})
	all := make([]string, tables)
	for i := range all {
		all[i] = fmt.Sprintf("t%d", i)
	}
	// Positions raised at slot creation do not count: wait for every table.
	start = time.Now()
	cancel, done = run()
	defer func() { cancel(); <-done }()
	// Drained when the slot's confirmed position (moved only once the
	// commits before it are published) passes the final position, and the
	// last table raised is past the position before it.
	for {
		var confirmed string
		err := pool.QueryRow(ctx, "SELECT coalesce(confirmed_flush_lsn::text, '0/0') FROM pg_replication_slots WHERE slot_name = $1", SlotName("tp_", db)).Scan(&confirmed)
		c, _ := lsnstore.ParseLSN(confirmed)
		if err == nil && c >= final {
			break
		}
		if time.Since(start) > 5*time.Minute {
			t.Fatalf("backlog not drained in 5 minutes: confirmed %s, final %s", confirmed, final)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, tb := range all {
		if p, err := store.WritePosition(ctx, []string{tb}); err != nil || !p.Covers(lsnstore.PositionOf(beforeLast)) {
			t.Fatalf("table %s at %v (%v); want at least %v", tb, p, err, beforeLast)
		}
	}
	drain := time.Since(start)
	t.Logf("%d transactions committed in %v (%.0f tx/s by 8 writers); backlog decoded and published in %v: %.0f tx/s (includes connecting)",
		n, writeTook.Round(time.Millisecond), float64(n)/writeTook.Seconds(), drain.Round(time.Millisecond), float64(n)/drain.Seconds())
}
