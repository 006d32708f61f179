package integration_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/tracker"
)

// rawConn is a pgx connection to the primary that bypasses GORM and the
// plugin, as a migration, a cron job or a person at psql would.
func (e *env) rawConn() *pgx.Conn {
	e.t.Helper()
	c, err := pgx.Connect(e.ctx(), e.pg.PrimaryDSN(e.dbName))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// rawWrite runs sql on c (one autocommit statement) and returns the WAL
// insert position read just before it: its records and its commit record
// all come after that position, and every earlier commit ends at or before
// it. A store position past it therefore means this write (or a later one)
// was published. (The insert position read after the commit would not do:
// other WAL, such as a running-transactions record, may follow the commit
// before it is read, and the tracker rightly publishes the commit's end.)
func rawWrite(t *testing.T, c *pgx.Conn, sql string, args ...any) lsnstore.LSN {
	t.Helper()
	ctx := context.Background()
	var s string
	if err := c.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
	l, _ := lsnstore.ParseLSN(s)
	return l
}

// waitRaised waits until the store's position of tables is past before, a
// position rawWrite returned: the write was published.
func waitRaised(t *testing.T, s lsnstore.Store, tables []string, before lsnstore.LSN, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got, err := s.WritePosition(context.Background(), tables)
		if err == nil && got.Main() > before {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("position of %q is %v (err %v) after %v; want past %v", tables, got, err, within, before)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitReady waits until the tracker reports ready.
func waitReady(t *testing.T, tr *tracker.Tracker, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := tr.Ready(context.Background(), time.Second)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tracker not ready after %v: %v", within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func checkDirectWrite(t *testing.T, mode tracker.Mode) {
	checkDirectWriteOn(t, mode, nil)
}

// checkDirectWriteOn is checkDirectWrite with the store and the tracker on
// rdb (nil: the package's Redis server).
func checkDirectWriteOn(t *testing.T, mode tracker.Mode, rdb redis.UniversalClient) {
	name := "direct-" + t.Name()
	var store *lsnstore.Redis
	var onRedis []func(*tracker.Config)
	if rdb == nil {
		store, _ = newRedisStore(t, name)
	} else {
		store = lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: name, Timeout: time.Second})
		onRedis = append(onRedis, func(c *tracker.Config) { c.Redis = rdb })
	}
	e := newEnv(t, withStore(store))
	run := startTracker(e, name, mode, onRedis...)
	if mode == tracker.ModeLogical {
		t.Cleanup(func() { dropSlot(e, run) })
	}
	waitReady(t, run.tr, 20*time.Second)
	// A plugin that also watches the tracker's decoding, opened while the
	// replicas replay (a plugin opened later only trusts replicas that have
	// replayed what the primary had when it started).
	watching, _ := e.open(withStore(store), withConfig(func(c *plugin.Config) { c.DirectWrites = true }))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the tracker's first observations are behind us
	e.resumeAll()
	e.waitReplicaServes(e.db)
	e.mustReplica(e.readItem(e.db, 1), "before the direct write")
	e.pauseAll()

	raw := e.rawConn()
	pos := rawWrite(t, raw, "UPDATE items SET name = 'direct', version = 7 WHERE id = 1")
	took := waitRaised(t, store, []string{"items"}, pos, 30*time.Second)
	t.Logf("mode %s: direct write published %v after its commit", mode, took)

	got := e.readItem(e.db, 1)
	e.mustPrimary(got, "read after a direct write")
	if got.Name != "direct" || got.Version != 7 {
		t.Fatalf("read after a direct write: %+v; want the direct write's data", got)
	}
	if mode == tracker.ModeLogical {
		// Exact: a table nobody wrote still reads from a replica, also for
		// a plugin that watches the decoding (DirectWrites): the tracker's
		// decoded position is recent.
		e.mustReplica(e.readOther(e.db), "read of an untouched table")
		time.Sleep(300 * time.Millisecond) // a few polls and status updates
		e.mustReplica(e.readOther(watching), "untouched table, DirectWrites with a live tracker")
		if got := e.readItem(watching, 1); got.Name != "direct" {
			t.Fatalf("STALE READ of a direct write with DirectWrites: %+v", got)
		}
	}
}

// TestDirectWritesWithoutTracker: with DirectWrites and no tracker
// decoding (no decoded position in the store), a direct write is never
// read stale: reads wait for replicas that have everything (here: paused,
// so the primary), while a plugin without DirectWrites reads it stale.
func TestDirectWritesWithoutTracker(t *testing.T) {
	store, _ := newRedisStore(t, "nodecode-"+t.Name())
	e := newEnv(t, withStore(store))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	watching, _ := e.open(withStore(store), withConfig(func(c *plugin.Config) { c.DirectWrites = true }))
	e.resumeAll()
	e.mustReplica(e.readOther(watching), "caught-up replicas serve reads with DirectWrites")
	e.pauseAll()
	rawWrite(t, e.rawConn(), "UPDATE items SET name = 'direct' WHERE id = 1")
	time.Sleep(50 * time.Millisecond)
	if got := e.readItem(e.db, 1); got.Name != "old" || !e.isReplica(got.Port) {
		t.Fatalf("control without DirectWrites: %+v, want the stale replica value", got)
	}
	got := e.readItem(watching, 1)
	if got.Name != "direct" {
		t.Fatalf("STALE READ of a direct write with DirectWrites and no tracker: %+v", got)
	}
	e.mustPrimary(got, "direct write, no tracker decoding")
}

func TestTrackerDirectWriteLogical(t *testing.T) {
	checkDirectWrite(t, tracker.ModeLogical)
}

// TestTrackerDirectWriteRedisDeployments is TestTrackerDirectWriteLogical
// with the tracker and the plugins sharing a store on a Redis Cluster and
// behind Sentinel: the tracker's raise of a direct write and its decoded
// position reach the plugins there too.
func TestTrackerDirectWriteRedisDeployments(t *testing.T) {
	for _, d := range testcluster.RedisDeployments() {
		if d.Name == "Standalone" {
			continue // TestTrackerDirectWriteLogical
		}
		t.Run(d.Name, func(t *testing.T) { checkDirectWriteOn(t, tracker.ModeLogical, d.Client(t)) })
	}
}

func TestTrackerDirectWriteStats(t *testing.T) {
	checkDirectWrite(t, tracker.ModeStats)
}

// dropSlot drops the test's replication slot (a slot left behind would
// keep WAL and block DROP DATABASE).
func dropSlot(e *env, run *trackerRun) {
	run.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, e.pg.PrimaryDSN(e.dbName))
	if err != nil {
		return
	}
	defer c.Close(ctx)
	slot := tracker.SlotName("frt_", e.dbName)
	for i := 0; i < 100; i++ {
		_, err = c.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
		if err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Logf("drop slot %s: %v", slot, err)
}

// TestTrackerRestartNoWriteMissed writes to 8 tables in rotation with the
// replicas paused while the tracker's stream is cut (the server ends its
// walsender) and while the tracker is stopped and a new one started. Every
// table's last committed row must then be read from the primary.
func TestTrackerRestartNoWriteMissed(t *testing.T) {
	name := "restart-" + t.Name()
	store, _ := newRedisStore(t, name)
	e := newEnv(t, withStore(store))
	const n = 8
	for i := 0; i < n; i++ {
		e.exec(fmt.Sprintf("CREATE TABLE w%d (id int PRIMARY KEY)", i))
	}
	run := startLogicalTracker(e, name)
	time.Sleep(200 * time.Millisecond)
	e.resumeAll()
	e.pauseAll()

	raw := e.rawConn()
	admin := e.rawConn()
	last := make([]int, n)
	lastPos := make([]lsnstore.LSN, n)
	var mu sync.Mutex
	write := func(k int) {
		tbl := k % n
		pos := rawWrite(t, raw, fmt.Sprintf("INSERT INTO w%d VALUES ($1)", tbl), k)
		mu.Lock()
		last[tbl], lastPos[tbl] = k, pos
		mu.Unlock()
	}
	k := 1
	for ; k <= 100; k++ {
		write(k)
	}
	// Cut the stream from the server side (as a network failure would).
	if _, err := admin.Exec(context.Background(),
		"SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL",
		tracker.SlotName("frt_", e.dbName)); err != nil {
		t.Fatal(err)
	}
	for ; k <= 200; k++ {
		write(k)
	}
	// Stop the tracker mid-stream, write while it is down, start a new one.
	run.stop()
	for ; k <= 300; k++ {
		write(k)
	}
	run.start()
	for ; k <= 400; k++ {
		write(k)
	}
	for i := 0; i < n; i++ {
		waitRaised(t, store, []string{fmt.Sprintf("w%d", i)}, lastPos[i], 30*time.Second)
	}
	for i := 0; i < n; i++ {
		got := e.readCol(e.db, fmt.Sprintf("w%d", i), "max(id)::text", "")
		e.mustPrimary(got, fmt.Sprintf("read of w%d", i))
		if got.Name != fmt.Sprint(last[i]) {
			t.Fatalf("w%d: %+v; want last committed id %d", i, got, last[i])
		}
	}
}

// TestDirectWritesTrackerDied: a tracker that stops decoding leaves its
// decoded position in the store until the key expires (minutes). A plugin
// with DirectWrites stops trusting it MaxDecodeDelay after the tracker's
// last progress: a direct write made after the tracker died is read fresh
// once that time and two polls have passed, although the WAL it wrote is
// far below MaxDecodeLag.
func TestDirectWritesTrackerDied(t *testing.T) {
	name := "died-" + t.Name()
	store, _ := newRedisStore(t, name)
	e := newEnv(t, withStore(store))
	run := startLogicalTracker(e, name)
	const delay = 300 * time.Millisecond
	watching, _ := e.open(withStore(store), withConfig(func(c *plugin.Config) {
		c.DirectWrites = true
		c.MaxDecodeDelay = delay
	}))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	// A loaded machine (the whole suite under -race) can keep the
	// tracker's decoding behind MaxDecodeDelay for seconds.
	deadline := time.Now().Add(30 * time.Second)
	for !e.isReplica(e.readItem(watching, 1).Port) {
		if time.Now().After(deadline) {
			t.Fatal("with a live tracker, reads with DirectWrites never went to a replica in 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	run.stop() // the tracker dies; its decoded position stays in the store
	if pos, err := store.DecodedPosition(context.Background()); err != nil || pos == 0 {
		t.Fatalf("decoded position after the tracker stopped: %v, %v; want it still there", pos, err)
	}
	e.pauseAll()
	rawWrite(t, e.rawConn(), "UPDATE items SET name = 'direct' WHERE id = 1")
	time.Sleep(delay + 100*time.Millisecond) // MaxDecodeDelay and a few polls
	if got := e.readItem(watching, 1); got.Name != "direct" {
		t.Fatalf("STALE READ of a direct write made after the tracker died: %+v", got)
	}
}
