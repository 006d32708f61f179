package reshard

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gormmysql "gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// TestFreshnessOfMovedRows: the target's replicas are paused while the
// move copies and switches. The copied rows were written outside the
// application, but the mover reports every chunk to the target's
// freshread plugin (Shard.RecordWrite = (*plugin.Plugin).RecordWrite), so
// a read of a moved row through that plugin goes to the primary and finds
// it, not to a paused replica that has not replayed it. The control: a row
// written on the target's primary without RecordWrite is read from a
// paused replica, and missed.
func TestFreshnessOfMovedRows(t *testing.T) { testFreshnessOfMovedRows(t, newEnv) }

// TestMariaDBFreshnessOfMovedRows is TestFreshnessOfMovedRows on MariaDB
// shards: the target's plugin keeps GTID positions, and its replica's SQL
// thread is stopped.
func TestMariaDBFreshnessOfMovedRows(t *testing.T) { testFreshnessOfMovedRows(t, newMariaEnv) }

func testFreshnessOfMovedRows(t *testing.T, mk newEnvFunc) {
	ctx := context.Background()
	e, ft := newFreshTarget(t, mk)
	cfg := e.config()
	cfg.Shards[ft.shard].RecordWrite = ft.p.RecordWrite
	m, err := New(cfg, Move{Buckets: []int{1}, From: "s0", To: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}

	// The control: a write the plugin does not know of is read stale.
	if _, err := e.db["s1"].Exec(`INSERT INTO ctl VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := ft.gdb.Table("ctl").Count(&n).Error; err != nil || n != 0 || ft.decision().Target != plugin.ReplicaTarget {
		t.Fatalf("control: %d rows, %v, decision %+v; want 0 rows from a paused replica", n, err, ft.decision())
	}
	ft.readMoved(e)
}

// TestFreshnessWhenRecordsFail: every record of the copy and the catch-up
// fails (the position store unreachable from the mover), so the target's
// plugin, in another process, knows nothing of the copied rows. The
// switch records every moved table once more before it publishes the map:
// when that fails too, the switch fails and the map still names the
// source; when it succeeds, a read of a moved row through the target's
// plugin comes from the primary, complete, although the replicas were
// paused before the copy.
func TestFreshnessWhenRecordsFail(t *testing.T) { testFreshnessWhenRecordsFail(t, newEnv) }

// TestMariaDBFreshnessWhenRecordsFail is TestFreshnessWhenRecordsFail on
// MariaDB shards.
// TestMariaDBFreshnessWhenRecordsFail: testFreshnessWhenRecordsFail asserts.
func TestMariaDBFreshnessWhenRecordsFail(t *testing.T) {
	testFreshnessWhenRecordsFail(t, newMariaEnv)
}

func testFreshnessWhenRecordsFail(t *testing.T, mk newEnvFunc) {
	ctx := context.Background()
	e, ft := newFreshTarget(t, mk)
	var (
		failing atomic.Bool
		calls   atomic.Int64
	)
	failing.Store(true)
	cfg := e.config()
	cfg.Shards[ft.shard].RecordWrite = func(ctx context.Context, tables ...string) error {
		calls.Add(1)
		if failing.Load() {
			return errors.New("position store unreachable")
		}
		return ft.p.RecordWrite(ctx, tables...)
	}
	m := e.copiedMove(cfg, Move{Buckets: []int{1}, From: "s0", To: "s1"})
	if _, err := m.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if calls.Load() == 0 {
		t.Fatal("the copy recorded no write")
	}
	if _, err := m.Switch(ctx); err == nil {
		t.Fatal("a switch whose record of the moved rows failed published the map")
	}
	if bm, _, _, err := e.store.Load(ctx); err != nil || bm.Owners[1] != "s0" {
		t.Fatalf("after the failed switch bucket 1 is on %q (%v), want s0", bm.Owners[1], err)
	}
	failing.Store(false)
	if _, err := m.Switch(ctx); err != nil {
		t.Fatal(err)
	}
	if bm, _, _, err := e.store.Load(ctx); err != nil || bm.Owners[1] != "s1" {
		t.Fatalf("after the switch bucket 1 is on %q (%v), want s1", bm.Owners[1], err)
	}
	ft.readMoved(e)
}

// freshTarget is shard s1's freshread plugin, as a service process would
// have it, with its replicas paused.
type freshTarget struct {
	gdb   *gorm.DB
	p     *plugin.Plugin
	shard int // s1's index in the env's Config.Shards

	mu   sync.Mutex
	last plugin.Decision
}

func (ft *freshTarget) decision() plugin.Decision {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return ft.last
}

// newFreshTarget makes two shards (bucket 1, of user 9, is s0's), 400
// orders, a table ctl on s1, and s1's plugin; it checks that the plugin
// reads s1's own rows from a replica, then pauses the replicas (on
// MariaDB, stops the replica's SQL thread, which every database of the
// server shares, until the test ends).
func newFreshTarget(t *testing.T, mk newEnvFunc) (*env, *freshTarget) {
	ctx := context.Background()
	owners := []string{"s0", "s0", "s0", "s0", "s1", "s1", "s1", "s1"}
	e := mk(t, []string{"s0", "s1"}, owners)
	e.seed(newLedger(), 1, 400)
	if _, err := e.db["s1"].Exec(`CREATE TABLE ctl (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	var (
		primary  gorm.Dialector
		replicas []gorm.Dialector
		pause    func(ctx context.Context) error
		resume   func(ctx context.Context)
	)
	if e.maria != nil {
		if err := e.maria.WaitCaughtUp(ctx); err != nil {
			t.Fatal(err)
		}
		primary = gormmysql.Open(e.maria.PrimaryDSN(e.dbName["s1"]))
		replicas = []gorm.Dialector{gormmysql.Open(e.maria.ReplicaDSN(e.dbName["s1"]))}
		pause = e.maria.StopApply
		resume = func(ctx context.Context) { e.maria.StartApply(ctx) }
	} else {
		if err := e.pg.WaitCaughtUp(ctx); err != nil {
			t.Fatal(err)
		}
		primary = postgres.Open(e.pg.PrimaryDSN(e.dbName["s1"]))
		for i := 0; i < e.pg.Replicas(); i++ {
			replicas = append(replicas, postgres.Open(e.pg.ReplicaDSN(i, e.dbName["s1"])))
		}
		pause = func(ctx context.Context) error {
			for i := 0; i < e.pg.Replicas(); i++ {
				if err := e.pg.PauseReplay(ctx, i); err != nil {
					return err
				}
			}
			return nil
		}
		resume = func(ctx context.Context) {
			for i := 0; i < e.pg.Replicas(); i++ {
				e.pg.ResumeReplay(ctx, i)
			}
		}
	}
	gdb, err := gorm.Open(primary, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := gdb.DB(); err == nil {
			sqlDB.Close()
		}
	})
	ft := &freshTarget{gdb: gdb, shard: slices.Index(e.shards, "s1")}
	pc := plugin.Config{Store: lsnstore.NewMemory(), PollInterval: 5 * time.Millisecond, OnDecision: func(_ context.Context, d plugin.Decision) {
		ft.mu.Lock()
		ft.last = d
		ft.mu.Unlock()
	}}
	for i, d := range replicas {
		pc.Replicas = append(pc.Replicas, plugin.Replica{Name: "r" + string(rune('0'+i)), Dialector: d})
	}
	ft.p = plugin.New(pc)
	if err := gdb.Use(ft.p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ft.p.Close() })
	// The poller sees the replicas caught up (bounded wait).
	var n int64
	for deadline := time.Now().Add(15 * time.Second); ; {
		err := gdb.Table("orders").Where("user_id = ?", 5).Count(&n).Error
		if err == nil && n > 0 && ft.decision().Target == plugin.ReplicaTarget {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a read of s1's own rows before the move: %d rows, %v, decision %+v; want a replica", n, err, ft.decision())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(func() { resume(context.Background()) })
	if err := pause(ctx); err != nil {
		t.Fatal(err)
	}
	return e, ft
}

// readMoved reads the moved user 9's orders through s1's plugin: every
// row s0 has, from the primary.
func (ft *freshTarget) readMoved(e *env) {
	t := e.t
	t.Helper()
	var want int64
	if err := e.db["s0"].QueryRow(`SELECT count(*) FROM orders WHERE user_id = 9`).Scan(&want); err != nil || want == 0 {
		t.Fatalf("user 9's orders on s0: %d %v", want, err)
	}
	var got []struct {
		ID     int64
		Status string
	}
	if err := ft.gdb.Table("orders").Where("user_id = ?", 9).Find(&got).Error; err != nil {
		t.Fatal(err)
	}
	if d := ft.decision(); int64(len(got)) != want || d.Target != plugin.Primary {
		t.Fatalf("a read of the moved user 9 on s1: %d rows of %d, decision %+v; want every row, from the primary", len(got), want, d)
	}
}
