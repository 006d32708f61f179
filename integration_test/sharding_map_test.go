package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/freshread/freshread/freshreadprom"
	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/sharding"
)

// The shared bucket map on a real PostgreSQL (SQLMapStore): processes
// follow a published version, a process that cannot reach the store stops
// routing when its lease runs out, an invalid map is neither adopted nor
// acknowledged, and a shard's guard error makes a statement go to the new
// owner (docs/design/sharding-and-moves.md, "The shared bucket map").

// newMapStore creates a database for the map (the lookup database's role)
// and a store on it, through a relay when relay is set.
func newMapStore(t *testing.T, relay *testcluster.Relay) *sharding.SQLMapStore {
	t.Helper()
	pg := testcluster.PostgresFor(t)
	name := pg.CreateDatabase(t)
	dsn := pg.PrimaryDSN(name)
	direct := openSQL(t, dsn)
	if err := sharding.NewSQLMapStore(direct).EnsureSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	if relay == nil {
		return sharding.NewSQLMapStore(direct)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = fmt.Sprintf("127.0.0.1:%d", relay.Port())
	return sharding.NewSQLMapStore(openSQL(t, u.String()))
}

func openSQL(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// testWriter sends the plugin's log to the test's.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimSpace(string(p)))
	return len(p), nil
}

// withMap makes the plugin follow store as client id.
func withMap(t *testing.T, store sharding.MapStore, id string, refresh, lease time.Duration) shOpt {
	return func(c *sharding.Config) {
		c.Map, c.ClientID, c.MapRefresh, c.MapLease = store, id, refresh, lease
		c.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
}

// moveRows moves the orders of buckets from shard from to shard to by
// hand (what package reshard will do online).
func (e *shEnv) moveRows(from, to string, buckets ...int) int {
	e.t.Helper()
	var rows []ShOrder
	if err := e.direct[from].Where("user_id % 1024 IN ?", buckets).Find(&rows).Error; err != nil {
		e.t.Fatal(err)
	}
	if len(rows) == 0 {
		return 0
	}
	if err := e.direct[to].Create(&rows).Error; err != nil {
		e.t.Fatal(err)
	}
	if err := e.direct[from].Where("user_id % 1024 IN ?", buckets).Delete(&ShOrder{}).Error; err != nil {
		e.t.Fatal(err)
	}
	return len(rows)
}

func waitUntil(t *testing.T, what string, d time.Duration, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

func usersOf(rows map[int64]int64) map[int64]int {
	out := map[int64]int{}
	for _, u := range rows {
		out[u]++
	}
	return out
}

func mapMetric(t *testing.T, s *sharding.Sharding, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(freshreadprom.Sharding(s))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// Two processes on one SQLMapStore: a version moving buckets 5 and 6 from
// s0 to s1 (rows moved by hand) is followed by both within a second, and
// their writes and reads of those users then go to s1 (checked in s1's
// database). A shard added for a move (s4) is not read by scatter reads
// until a version gives it a bucket.
func TestShardingMapFollow(t *testing.T) {
	ctx := context.Background()
	store := newMapStore(t, nil)
	e := openShEnvSpec(t, shEnvSpec{extra: []string{"s4"}}, withIDs(fixedIDs(t, 11)), withMap(t, store, "a", 50*time.Millisecond, time.Second))
	dbB, sB := e.another(withIDs(fixedIDs(t, 12)), withMap(t, store, "b", 50*time.Millisecond, time.Second))
	users := []int64{5, 6, 1029, 1030} // buckets 5, 6, 5, 6: on s0
	for _, u := range users {
		if err := e.db.Create(&ShOrder{UserID: u, Status: "before", Amount: 1}).Error; err != nil {
			t.Fatal(err)
		}
	}
	if got := usersOf(e.onShard("s0")); len(got) != 4 {
		t.Fatalf("s0 holds users %v, want the four", got)
	}
	e.resetCounts()
	var all []ShOrder
	if err := e.db.Where("status = ?", "before").Find(&all).Error; err != nil || len(all) != 4 {
		t.Fatalf("scatter read: %d rows, %v", len(all), err)
	}
	if c := e.countsSnapshot(); c["s4"] != 0 || c["s0"] != 1 {
		t.Fatalf("scatter read ran on %v: s4 owns no bucket yet", c)
	}
	if v := sB.MapVersion(); v != 0 || e.s.MapVersion() != 0 {
		t.Fatalf("versions %d, %d before anything was published", e.s.MapVersion(), v)
	}

	if n := e.moveRows("s0", "s1", 5, 6); n != 4 {
		t.Fatalf("moved %d rows", n)
	}
	m := e.s.Map()
	m.Owners[5], m.Owners[6] = "s1", "s1"
	v, err := store.Publish(ctx, 0, m)
	if err != nil || v != 1 {
		t.Fatalf("publish: %d, %v", v, err)
	}
	if _, err := store.Publish(ctx, 0, m); !errors.Is(err, sharding.ErrMapConflict) {
		t.Fatalf("a second publish over version 0: %v, want ErrMapConflict", err)
	}
	took := waitUntil(t, "both processes follow version 1", time.Second, func() bool {
		return e.s.MapVersion() == 1 && sB.MapVersion() == 1
	})
	t.Logf("both processes routed with version 1 %s after it was published", took)

	for i, u := range users {
		db := e.db
		if i%2 == 1 {
			db = dbB
		}
		if err := db.Create(&ShOrder{UserID: u, Status: "after", Amount: 2}).Error; err != nil {
			t.Fatal(err)
		}
	}
	on1, on0 := usersOf(e.onShard("s1")), usersOf(e.onShard("s0"))
	for _, u := range users {
		if on1[u] != 2 || on0[u] != 0 {
			t.Fatalf("user %d: %d rows on s1, %d on s0; want 2 and 0", u, on1[u], on0[u])
		}
	}
	e.waitCaughtUp()
	e.resetCounts()
	for _, db := range []*gorm.DB{e.db, dbB} {
		var rows []ShOrder
		if err := db.Where("user_id IN ?", users).Find(&rows).Error; err != nil || len(rows) != 8 {
			t.Fatalf("read of the moved users: %d rows, %v", len(rows), err)
		}
	}
	if c := e.countsSnapshot(); c["s1"] != 1 || c["s0"] != 0 {
		t.Fatalf("process a's read ran on %v, want s1 only", c)
	}
	clients, err := store.Clients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(clients) != 2 {
		t.Fatalf("clients %+v", clients)
	}
	for _, c := range clients {
		if c.Version != 1 || c.Age > time.Second || c.Lease != time.Second {
			t.Fatalf("client %+v, want version 1, recent, lease 1s", c)
		}
	}

	// Version 2 gives bucket 7 to s4: scatter reads include it.
	m2 := e.s.Map()
	m2.Owners[7] = "s4"
	if _, err := store.Publish(ctx, 1, m2); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "version 2", time.Second, func() bool { return e.s.MapVersion() == 2 && sB.MapVersion() == 2 })
	if err := dbB.Create(&ShOrder{UserID: 7, Status: "after"}).Error; err != nil {
		t.Fatal(err)
	}
	if got := usersOf(e.onShard("s4")); got[7] != 1 {
		t.Fatalf("s4 holds %v, want user 7's row", got)
	}
	e.resetCounts()
	if err := e.db.Where("status = ?", "after").Find(&all).Error; err != nil {
		t.Fatal(err)
	}
	if c := e.countsSnapshot(); c["s4"] != 1 {
		t.Fatalf("scatter read ran on %v, want s4 too", c)
	}
	if v := mapMetric(t, sB, "freshread_sharding_map_version"); v != 2 {
		t.Fatalf("version gauge %v", v)
	}
}

// A process whose map store stops answering (a relay holds its answers)
// refuses sharded statements with ErrMapStale once its lease has run out,
// and routes again once the store answers.
func TestShardingMapStale(t *testing.T) {
	pg := testcluster.PostgresFor(t)
	relay, err := testcluster.NewRelay(fmt.Sprintf("%s:%d", pg.Host(), pg.PrimaryPort()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	store := newMapStore(t, relay)
	lease := 500 * time.Millisecond
	e := openShEnvSpec(t, shEnvSpec{}, withIDs(fixedIDs(t, 13)), withMap(t, store, "stale", 50*time.Millisecond, lease))
	if err := e.db.Create(&ShOrder{UserID: 5, Status: "ok"}).Error; err != nil {
		t.Fatal(err)
	}
	relay.Stall(true)
	stalled := time.Now()
	var rows []ShOrder
	for time.Since(stalled) < 5*time.Second {
		if err = e.db.Where("user_id = ?", 5).Find(&rows).Error; err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	el := time.Since(stalled)
	if !errors.Is(err, sharding.ErrMapStale) {
		t.Fatalf("err %v after %s, want ErrMapStale", err, el)
	}
	if el < lease-60*time.Millisecond {
		t.Fatalf("ErrMapStale %s after the store stalled, before the lease (%s) could run out", el, lease)
	}
	t.Logf("refused %s after the store stalled: %v", el, err)
	err = e.db.Create(&ShOrder{UserID: 6, Status: "refused"}).Error
	if !errors.Is(err, sharding.ErrMapStale) {
		t.Fatalf("write while stale: %v", err)
	}
	var products []ShProduct
	if err := e.db.Find(&products).Error; err != nil || len(products) != 1 {
		t.Fatalf("a table of the default database: %d rows, %v", len(products), err)
	}
	relay.Stall(false)
	waitUntil(t, "routing again", 5*time.Second, func() bool {
		return e.db.Where("user_id = ?", 5).Find(&rows).Error == nil
	})
	if len(rows) != 1 {
		t.Fatalf("%d rows", len(rows))
	}
	if err := e.db.Create(&ShOrder{UserID: 6, Status: "ok"}).Error; err != nil {
		t.Fatal(err)
	}
	if got := usersOf(e.onShard("s0")); got[6] != 1 {
		t.Fatalf("s0 holds %v", got)
	}
	if n := mapMetric(t, e.s, "freshread_sharding_map_refresh_errors_total"); n < 1 {
		t.Fatalf("refresh errors %v", n)
	}
}

// A version naming a shard the process does not have is not adopted and
// not acknowledged (the client's row keeps version 0 and ages past its
// lease), and the process refuses sharded statements once its lease runs
// out; a valid version published next is adopted.
func TestShardingMapInvalid(t *testing.T) {
	ctx := context.Background()
	store := newMapStore(t, nil)
	lease := 400 * time.Millisecond
	e := openShEnvSpec(t, shEnvSpec{}, withMap(t, store, "inv", 50*time.Millisecond, lease))
	m := e.s.Map()
	m.Owners[5] = "s9"
	if _, err := store.Publish(ctx, 0, m); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "ErrMapStale", 5*time.Second, func() bool {
		err := e.db.Where("user_id = ?", 5).Find(&[]ShOrder{}).Error
		return errors.Is(err, sharding.ErrMapStale) && errors.Is(err, sharding.ErrUnknownShard)
	})
	if v := e.s.MapVersion(); v != 0 {
		t.Fatalf("version %d adopted", v)
	}
	err := e.db.Create(&ShOrder{ID: 1, UserID: 5}).Error
	if !errors.Is(err, sharding.ErrMapStale) {
		t.Fatalf("create: %v", err)
	}
	if e.totalOrders() != 0 {
		t.Fatal("a row was written")
	}
	// The refused version is never acknowledged: the client's last
	// acknowledgement (of version 0) grows older than its lease. (Its
	// lease ran out counted from the start of its last Load, which came
	// before that acknowledgement, so wait for the age to pass the lease.)
	waitUntil(t, "no acknowledgement for longer than the lease", 5*time.Second, func() bool {
		clients, err := store.Clients(ctx)
		if err != nil || len(clients) != 1 || clients[0].Version != 0 {
			t.Fatalf("clients %+v (%v): want one, at version 0", clients, err)
		}
		return clients[0].Age > lease
	})
	m2 := e.s.Map()
	m2.Owners[5] = "s1"
	if _, err := store.Publish(ctx, 1, m2); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "version 2", 5*time.Second, func() bool {
		return e.db.Create(&ShOrder{ID: 2, UserID: 5}).Error == nil
	})
	if e.s.MapVersion() != 2 || usersOf(e.onShard("s1"))[5] != 1 {
		t.Fatalf("version %d, s1 holds %v", e.s.MapVersion(), e.onShard("s1"))
	}
	clients, _ := store.Clients(ctx)
	if clients[0].Version != 2 {
		t.Fatalf("clients %+v", clients)
	}
}

// installGuard makes shard name refuse writes of the buckets in its table
// guard_buckets with SQLSTATE FRB01, as package reshard's guard does.
func (e *shEnv) installGuard(name string, buckets ...int) {
	e.t.Helper()
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS guard_buckets (b int PRIMARY KEY)`,
		`CREATE OR REPLACE FUNCTION guard_bucket() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF EXISTS (SELECT 1 FROM guard_buckets WHERE b = NEW.user_id % 1024) THEN
				RAISE EXCEPTION 'bucket % is not owned by this shard', NEW.user_id % 1024 USING ERRCODE = 'FRB01';
			END IF;
			RETURN NEW;
		END $$`,
		`DROP TRIGGER IF EXISTS guard_bucket ON orders`,
		`CREATE TRIGGER guard_bucket BEFORE INSERT OR UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION guard_bucket()`,
	} {
		if err := e.direct[name].Exec(q).Error; err != nil {
			e.t.Fatal(err)
		}
	}
	for _, b := range buckets {
		if err := e.direct[name].Exec(`INSERT INTO guard_buckets VALUES (?) ON CONFLICT DO NOTHING`, b).Error; err != nil {
			e.t.Fatal(err)
		}
	}
}

// A process with an old map writes to s0, whose guard refuses the bucket:
// outside a transaction the statement is routed again with the refreshed
// map and its row lands on s1; inside a transaction the error is returned
// (errors.Is ErrBucketMoved, the server's error kept), nothing is written,
// and the transaction run again goes to s1. While the map has not changed
// yet (a switch in progress) the statement waits and retries.
func TestShardingMapGuardRetry(t *testing.T) {
	ctx := context.Background()
	store := newMapStore(t, nil)
	// Refreshing hourly: neither process sees a new version by itself.
	e := openShEnvSpec(t, shEnvSpec{}, withIDs(fixedIDs(t, 14)), withMap(t, store, "a", time.Hour, 2*time.Hour))
	dbT, sT := e.another(withIDs(fixedIDs(t, 15)), withMap(t, store, "t", time.Hour, 2*time.Hour))
	e.installGuard("s0", 5)
	m := e.s.Map()
	m.Owners[5] = "s1"
	if _, err := store.Publish(ctx, 0, m); err != nil {
		t.Fatal(err)
	}
	if e.s.MapVersion() != 0 || sT.MapVersion() != 0 {
		t.Fatal("a process saw version 1 by itself")
	}

	e.resetCounts()
	o := ShOrder{UserID: 5, Status: "retried"}
	if err := e.db.Create(&o).Error; err != nil {
		t.Fatalf("create: %v", err)
	}
	if u, ok := e.onShard("s1")[o.ID]; !ok || u != 5 {
		t.Fatalf("order %d not on s1 (%v)", o.ID, e.onShard("s1"))
	}
	if len(e.onShard("s0")) != 0 {
		t.Fatalf("s0 holds %v", e.onShard("s0"))
	}
	if c := e.countsSnapshot(); c["s0"] != 1 || c["s1"] != 1 {
		t.Fatalf("statements per shard %v, want s0 (refused) and s1", c)
	}
	if e.s.MapVersion() != 1 {
		t.Fatalf("version %d after the guard error", e.s.MapVersion())
	}

	o2 := ShOrder{UserID: 1029, Status: "tx"} // bucket 5
	err := dbT.Transaction(func(tx *gorm.DB) error {
		return tx.Create(&o2).Error
	})
	if !errors.Is(err, sharding.ErrBucketMoved) {
		t.Fatalf("in a transaction: %v, want ErrBucketMoved", err)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != sharding.GuardSQLState || !strings.Contains(pe.Message, "bucket 5 is not owned") {
		t.Fatalf("err %v does not carry the server's error", err)
	}
	t.Logf("in a transaction: %v", err)
	if e.totalOrders() != 1 {
		t.Fatalf("%d orders: the refused transaction wrote", e.totalOrders())
	}
	if sT.MapVersion() != 1 {
		t.Fatalf("version %d: the map was not refreshed at the guard error", sT.MapVersion())
	}
	id := o2.ID
	if err := dbT.Transaction(func(tx *gorm.DB) error { return tx.Create(&o2).Error }); err != nil {
		t.Fatalf("the transaction run again: %v", err)
	}
	if u, ok := e.onShard("s1")[o2.ID]; !ok || u != 1029 || o2.ID != id {
		t.Fatalf("order %d (first attempt %d) not on s1", o2.ID, id)
	}

	// A switch in progress: s0 refuses bucket 6 before the map moves it.
	e.installGuard("s0", 6)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(200 * time.Millisecond)
		m2 := m
		m2.Owners = slices.Clone(m.Owners)
		m2.Owners[6] = "s1"
		if _, err := store.Publish(ctx, 1, m2); err != nil {
			t.Error(err)
		}
	}()
	start := time.Now()
	o3 := ShOrder{UserID: 6, Status: "waited"}
	err = e.db.Create(&o3).Error
	took := time.Since(start)
	wg.Wait()
	if err != nil {
		t.Fatalf("create during the switch: %v", err)
	}
	if _, ok := e.onShard("s1")[o3.ID]; !ok || took < 150*time.Millisecond {
		t.Fatalf("order not on s1, or not held (%s)", took)
	}
	t.Logf("held %s until the map moved bucket 6", took)
	if n := mapMetric(t, e.s, "freshread_sharding_bucket_moved_retries_total"); n < 2 {
		t.Fatalf("retries %v", n)
	}
}

// SQLMapStore on PostgreSQL: concurrent publishers of one version (one
// wins, the others get ErrMapConflict), the bucket count kept, moves with
// their caught-up age by the database's clock, and the moves that are
// done or rolled back left out of Load.
func TestShardingMapStoreSQL(t *testing.T) {
	ctx := context.Background()
	store := newMapStore(t, nil)
	if _, _, found, err := store.Load(ctx); err != nil || found {
		t.Fatalf("empty store: found %v, %v", found, err)
	}
	m, err := sharding.MapFromAlgorithm(sharding.EvenBuckets(1024, shardNames...), shardNames, map[int64]string{42: "s3"})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg              sync.WaitGroup
		mu              sync.Mutex
		wins, conflicts int
		others          []error
	)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := store.Publish(ctx, 0, m)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, sharding.ErrMapConflict):
				conflicts++
			default:
				others = append(others, err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || conflicts != 7 || len(others) > 0 {
		t.Fatalf("8 publishers of version 1: %d won, %d conflicts, other errors %v", wins, conflicts, others)
	}
	got, moves, found, err := store.Load(ctx)
	if err != nil || !found || got.Version != 1 || len(got.Owners) != 1024 || got.HotUsers[42] != "s3" || len(moves) != 0 {
		t.Fatalf("load: version %d, %d buckets, hot %v, moves %v, found %v, %v", got.Version, len(got.Owners), got.HotUsers, moves, found, err)
	}
	short := got.Clone()
	short.Owners = short.Owners[:512]
	if _, err := store.Publish(ctx, 1, short); !errors.Is(err, sharding.ErrConfig) {
		t.Fatalf("publish with 512 buckets: %v, want ErrConfig", err)
	}
	if _, err := store.Publish(ctx, 5, got); !errors.Is(err, sharding.ErrMapConflict) {
		t.Fatalf("publish over version 5: %v, want ErrMapConflict", err)
	}

	mv := sharding.MoveStatus{ID: "m1", Buckets: []int{5, 6}, From: "s0", To: "s4", Phase: sharding.MoveCatchingUp}
	if err := store.SaveMove(ctx, mv, 0); err != nil {
		t.Fatal(err)
	}
	if err := store.SaveMove(ctx, sharding.MoveStatus{ID: "m2", Buckets: []int{7}, From: "s0", To: "s4", Phase: sharding.MoveCopying}, sharding.NotCaughtUp); err != nil {
		t.Fatal(err)
	}
	if err := store.SaveMove(ctx, sharding.MoveStatus{ID: "m0", Buckets: []int{8}, From: "s0", To: "s4", Phase: sharding.MoveDone}, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	mv.Phase = sharding.MoveSwitching
	if err := store.SaveMove(ctx, mv, sharding.NotCaughtUp); err != nil { // keeps caught_up_at
		t.Fatal(err)
	}
	_, moves, _, err = store.Load(ctx)
	if err != nil || len(moves) != 2 {
		t.Fatalf("moves %+v, %v: want m1 and m2 (m0 is done)", moves, err)
	}
	if moves[0].ID != "m1" || moves[0].Phase != sharding.MoveSwitching || !slices.Equal(moves[0].Buckets, []int{5, 6}) ||
		moves[0].CaughtUpAge < 50*time.Millisecond || moves[0].CaughtUpAge > 5*time.Second {
		t.Fatalf("m1 %+v: want switching, caught up 50ms..5s ago", moves[0])
	}
	if moves[1].ID != "m2" || moves[1].CaughtUpAge >= 0 {
		t.Fatalf("m2 %+v: want never caught up (negative age)", moves[1])
	}
	if err := store.Ack(ctx, "c1", 1, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	clients, err := store.Clients(ctx)
	if err != nil || len(clients) != 1 || clients[0].ID != "c1" || clients[0].Version != 1 || clients[0].Lease != 2*time.Second || clients[0].Age < 0 || clients[0].Age > time.Second {
		t.Fatalf("clients %+v, %v", clients, err)
	}
}

// AllowLag on real shards: while a move of bucket 5 from s0 to s4 is
// catching up, a read that accepts the lag reads s4, on its primary (the
// replicas, paused, do not have the copy), and other reads read s0.
func TestShardingMapAllowLag(t *testing.T) {
	ctx := context.Background()
	store := newMapStore(t, nil)
	e := openShEnvSpec(t, shEnvSpec{extra: []string{"s4"}}, withIDs(fixedIDs(t, 16)), withMap(t, store, "lag", time.Hour, 2*time.Hour))
	o := ShOrder{UserID: 5, Status: "owner"}
	if err := e.db.Create(&o).Error; err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp()
	e.pauseAll()
	if err := e.direct["s4"].Create(&ShOrder{ID: o.ID, UserID: 5, Status: "copy"}).Error; err != nil {
		t.Fatal(err)
	}
	status := func(db *gorm.DB) string {
		t.Helper()
		var rows []ShOrder
		if err := db.Where("user_id = ?", 5).Find(&rows).Error; err != nil || len(rows) != 1 {
			t.Fatalf("read: %v, %v", rows, err)
		}
		return rows[0].Status
	}
	mv := sharding.MoveStatus{ID: "m1", Buckets: []int{5}, From: "s0", To: "s4", Phase: sharding.MoveCatchingUp}
	if err := store.SaveMove(ctx, mv, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.s.RefreshMap(ctx); err != nil {
		t.Fatal(err)
	}
	if got := status(e.db.Clauses(sharding.AllowLag(time.Minute))); got != "copy" {
		t.Fatalf("AllowLag(1m) read %q, want the copy on s4's primary", got)
	}
	if got := status(e.db); got != "owner" {
		t.Fatalf("read without the hint: %q", got)
	}
	if got := status(e.db.Clauses(sharding.AllowLag(time.Nanosecond))); got != "owner" {
		t.Fatalf("AllowLag(1ns) read %q", got)
	}
	mv.Phase = sharding.MoveCopying
	if err := store.SaveMove(ctx, mv, sharding.NotCaughtUp); err != nil {
		t.Fatal(err)
	}
	if err := e.s.RefreshMap(ctx); err != nil {
		t.Fatal(err)
	}
	if got := status(e.db.Clauses(sharding.AllowLag(time.Minute))); got != "owner" {
		t.Fatalf("AllowLag read during the copy: %q", got)
	}
	e.resumeAll()
}
