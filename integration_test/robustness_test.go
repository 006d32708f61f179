package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// TestMaxLagMakesLaggingReplicaUnusable: a replica that has not replayed
// what the primary wrote MaxLag ago is not used even for tables nobody
// wrote (an expired store key could hide a write it lacks).
func TestMaxLagMakesLaggingReplicaUnusable(t *testing.T) {
	e := newEnv(t, withConfig(func(c *plugin.Config) { c.MaxLag = 300 * time.Millisecond }))
	e.resumeAll()
	e.pause(0)
	if err := e.db.Create(&Item{ID: 1, Name: "x"}).Error; err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	seen1 := false
	for i := 0; i < 30; i++ {
		got := e.readOther(e.db)
		if got.Port == e.pg.ReplicaPort(0) {
			t.Fatalf("read %d served by replica 0, paused for longer than MaxLag", i)
		}
		seen1 = seen1 || got.Port == e.pg.ReplicaPort(1)
	}
	if !seen1 {
		t.Fatal("the replica within MaxLag was never used")
	}
}

// TestUnparseablePositionGoesToPrimary: garbage in the store is treated as
// unknown: the read of that table goes to the primary, without an error.
func TestUnparseablePositionGoesToPrimary(t *testing.T) {
	database := "garbage-" + t.Name()
	store, r := newRedisStore(t, database)
	e := newEnv(t, withStore(store))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.mustReplica(e.readItem(e.db, 1), "before")
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rdb.Close()
	// The table's position and its unkeyed one (which a read by key
	// needs).
	for _, name := range []string{"items", lsnstore.UnkeyedName("items")} {
		if err := rdb.Set(context.Background(), "freshread:{"+database+"}-"+name+"-write_lsn", "not-a-position", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	got := e.readItem(e.db, 1)
	if got.Name != "old" {
		t.Fatalf("read: %+v", got)
	}
	e.mustPrimary(got, "table with an unparseable position")
	e.mustReplica(e.readOther(e.db), "other table")
	e.mu.Lock()
	last := e.decisions[len(e.decisions)-2]
	e.mu.Unlock()
	if last.Reason != plugin.ReasonStoreError {
		t.Fatalf("decision %+v, want reason store-error", last)
	}
}

// TestReplicaFailureRetriedOnPrimary: a replica that dies before the poller
// notices makes the read fail there; it is retried once on the primary and
// the caller sees the data, not an error.
func TestReplicaFailureRetriedOnPrimary(t *testing.T) {
	e := newEnv(t, withConfig(func(c *plugin.Config) {
		c.PollInterval = time.Hour // the poller will not notice
		c.MaxLag = 2 * time.Hour
	}))
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp()
	// A fresh plugin polls once at start: both replicas known fresh, unless
	// other tests' writes on the shared cluster moved the primary past
	// them at that instant (a process that just started waits for the
	// primary's position at its start): then another process.
	var db *gorm.DB
	deadline := time.Now().Add(15 * time.Second)
	for {
		db, _ = e.open(withConfig(func(c *plugin.Config) {
			c.PollInterval = time.Hour
			c.MaxLag = 2 * time.Hour
		}))
		if e.isReplica(e.readItem(db, 1).Port) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("before the failure: no process started in 15 s found a replica fresh at its only poll")
		}
	}
	for i := 0; i < e.pg.Replicas(); i++ {
		if err := e.pg.StopReplica(e.ctx(), i); err != nil {
			if err == testcluster.ErrUnsupported {
				t.Skip("provider cannot stop replicas")
			}
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.pg.StartReplica(context.Background(), i) })
	}
	for i := 0; i < 5; i++ {
		got := e.readItem(db, 1)
		if got.Name != "old" {
			t.Fatalf("read %d: %+v", i, got)
		}
		e.mustPrimary(got, "replicas dead, poller unaware")
	}
	e.mustHaveDecision(plugin.ReasonReplicaFailed)
}

// TestPolicyPicksAmongFreshReplicas: a dbresolver.Policy chooses among the
// fresh replicas.
func TestPolicyPicksAmongFreshReplicas(t *testing.T) {
	last := dbresolver.PolicyFunc(func(pools []gorm.ConnPool) gorm.ConnPool { return pools[len(pools)-1] })
	e := newEnv(t, withConfig(func(c *plugin.Config) { c.Policy = last }))
	e.resumeAll()
	for i := 0; i < 10; i++ {
		if got := e.readOther(e.db); got.Port != e.pg.ReplicaPort(e.pg.Replicas()-1) {
			t.Fatalf("policy ignored: served by %d", got.Port)
		}
	}
}

// TestMetricsCollector: the collector reports decisions and replica state.
func TestMetricsCollector(t *testing.T) {
	e := newEnv(t)
	e.resumeAll()
	e.waitReplicaServes(e.db)
	for i := 0; i < 5; i++ {
		e.readOther(e.db)
	}
	gather := func() map[string]float64 { return pluginMetrics(t, e.plug) }
	// Both replicas up for the poller (one may still be coming back from
	// an earlier test on the shared servers).
	found := gather()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) &&
		(found["freshread_replica_up,replica=r0"] != 1 || found["freshread_replica_up,replica=r1"] != 1); found = gather() {
		time.Sleep(20 * time.Millisecond)
	}
	if found["freshread_decisions_total,reason=fresh,target=replica"] < 5 {
		t.Fatalf("fresh replica decisions: %v", found)
	}
	if found["freshread_replica_up,replica=r0"] != 1 || found["freshread_replica_up,replica=r1"] != 1 {
		t.Fatalf("replica_up: %v", found)
	}
	if found["freshread_store_read_seconds"] < 5 {
		t.Fatalf("store latency samples: %v", found)
	}
	if _, ok := found["freshread_replica_replay_lag_bytes,replica=r0"]; !ok {
		t.Fatalf("no lag gauge: %v", found)
	}
}

// TestReadOnlyFunctionsLearned: STABLE user functions are learned from
// pg_proc, so raw SQL calling them may use a replica; VOLATILE ones stay
// writes.
func TestReadOnlyFunctionsLearned(t *testing.T) {
	e := newEnv(t)
	for _, q := range []string{
		`CREATE FUNCTION item_label(i int) RETURNS text STABLE LANGUAGE sql AS $$ SELECT 'label-' || i $$`,
		`CREATE FUNCTION bump() RETURNS int VOLATILE LANGUAGE sql AS $$ UPDATE others SET note = 'bumped' WHERE id = 1 RETURNING 1 $$`,
	} {
		if err := e.db.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	e.resumeAll()
	db, _ := e.open()
	// A process that just started waits for replicas past the primary's
	// position at its start, which other tests' writes on the shared
	// cluster move: eventually, not at once.
	s := e.eventuallyReplica(func() served {
		var s served
		if err := db.Raw("SELECT item_label(7) AS name, inet_server_port() AS port").Scan(&s).Error; err != nil {
			t.Fatal(err)
		}
		if s.Name != "label-7" {
			t.Fatalf("stable function: %+v", s)
		}
		return s
	}, "STABLE function")
	e.mustReplica(s, "STABLE function")
	var n int
	if err := db.Raw("SELECT bump()").Scan(&n).Error; err != nil || n != 1 {
		t.Fatalf("volatile function: %d %v (a replica would refuse the write)", n, err)
	}
	if got := e.readOther(db); got.Name != "bumped" {
		t.Fatalf("STALE READ after a write through a function: %+v", got)
	}
}

// TestRecoveryConflictRetriedOnPrimary: with max_standby_streaming_delay =
// 0, a lock taken on the primary cancels a running replica query ("conflict
// with recovery"); the read is run again on the primary and the caller gets
// the data, not the error.
func TestRecoveryConflictRetriedOnPrimary(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for i := 0; i < e.pg.Replicas(); i++ {
		if err := setReplicaSetting(ctx, e, i, "max_standby_streaming_delay", "0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = setReplicaSetting(context.Background(), e, i, "max_standby_streaming_delay", "") })
	}
	e.resumeAll()
	e.waitReplicaServes(e.db) // the read below must start on a replica
	go func() {
		time.Sleep(500 * time.Millisecond)
		_ = e.db.Transaction(func(tx *gorm.DB) error {
			return tx.Exec("LOCK TABLE others IN ACCESS EXCLUSIVE MODE").Error
		})
	}()
	var rows []served
	err := e.db.Model(&Other{}).Select("note AS name, length(pg_sleep(2)::text) AS version, inet_server_port() AS port").
		Where("id = 1").Find(&rows).Error
	if err != nil {
		t.Fatalf("read cancelled by a recovery conflict reached the caller: %v", err)
	}
	if len(rows) != 1 || rows[0].Name != "untouched" {
		t.Fatalf("rows %+v", rows)
	}
	e.mustPrimary(rows[0], "read retried after a recovery conflict")
	e.mustHaveDecision(plugin.ReasonReplicaFailed)
}

// setReplicaSetting sets (value "" resets) a setting on replica i and
// reloads its configuration.
func setReplicaSetting(ctx context.Context, e *env, i int, name, value string) error {
	db, err := gorm.Open(postgres.Open(e.pg.ReplicaDSN(i, "")), quiet())
	if err != nil {
		return err
	}
	defer closeDB(db)
	q := "ALTER SYSTEM SET " + name + " = '" + value + "'"
	if value == "" {
		q = "ALTER SYSTEM RESET " + name
	}
	if err := db.WithContext(ctx).Exec(q).Error; err != nil {
		return err
	}
	return db.WithContext(ctx).Exec("SELECT pg_reload_conf()").Error
}

// mustHaveDecision fails the test unless a decision with reason was
// recorded.
func (e *env) mustHaveDecision(reason plugin.Reason) {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, d := range e.decisions {
		if d.Reason == reason {
			return
		}
	}
	e.t.Fatalf("no %s decision recorded", reason)
}
