package reshard

import (
	"context"
	"sync"
	"testing"
	"time"

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
func TestFreshnessOfMovedRows(t *testing.T) {
	ctx := context.Background()
	owners := []string{"s0", "s0", "s0", "s0", "s1", "s1", "s1", "s1"}
	e := newEnv(t, []string{"s0", "s1"}, owners)
	e.seed(newLedger(), 1, 400)
	if _, err := e.db["s1"].Exec(`CREATE TABLE ctl (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if err := e.pg.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	gdb, err := gorm.Open(postgres.Open(e.pg.PrimaryDSN(e.dbName["s1"])), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := gdb.DB(); err == nil {
			sqlDB.Close()
		}
	})
	var (
		mu   sync.Mutex
		last plugin.Decision
	)
	pc := plugin.Config{Store: lsnstore.NewMemory(), PollInterval: 5 * time.Millisecond, OnDecision: func(_ context.Context, d plugin.Decision) {
		mu.Lock()
		last = d
		mu.Unlock()
	}}
	for i := 0; i < e.pg.Replicas(); i++ {
		pc.Replicas = append(pc.Replicas, plugin.Replica{Name: "r" + string(rune('0'+i)), Dialector: postgres.Open(e.pg.ReplicaDSN(i, e.dbName["s1"]))})
	}
	p := plugin.New(pc)
	if err := gdb.Use(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	decision := func() plugin.Decision {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
	time.Sleep(50 * time.Millisecond) // the poller sees the replicas caught up
	var n int64
	if err := gdb.Table("orders").Where("user_id = ?", 5).Count(&n).Error; err != nil || n == 0 || decision().Target != plugin.ReplicaTarget {
		t.Fatalf("a read of s1's own rows before the move: %d rows, %v, decision %+v; want a replica", n, err, decision())
	}

	for i := 0; i < e.pg.Replicas(); i++ {
		if err := e.pg.PauseReplay(ctx, i); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.pg.ResumeReplay(context.Background(), i) })
	}
	cfg := e.config()
	for i := range cfg.Shards {
		if cfg.Shards[i].Name == "s1" {
			cfg.Shards[i].RecordWrite = p.RecordWrite
		}
	}
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
	if err := gdb.Table("ctl").Count(&n).Error; err != nil || n != 0 || decision().Target != plugin.ReplicaTarget {
		t.Fatalf("control: %d rows, %v, decision %+v; want 0 rows from a paused replica", n, err, decision())
	}
	var want int64
	if err := e.db["s0"].QueryRow(`SELECT count(*) FROM orders WHERE user_id = 9`).Scan(&want); err != nil || want == 0 {
		t.Fatalf("user 9's orders on s0: %d %v", want, err)
	}
	var got []struct {
		ID     int64
		Status string
	}
	if err := gdb.Table("orders").Where("user_id = ?", 9).Find(&got).Error; err != nil {
		t.Fatal(err)
	}
	if d := decision(); int64(len(got)) != want || d.Target != plugin.Primary {
		t.Fatalf("a read of the moved user 9 on s1: %d rows of %d, decision %+v; want every row, from the primary", len(got), want, d)
	}
}
