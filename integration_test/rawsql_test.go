package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/freshread/freshread/plugin"
)

// TestRawSQLRouting: raw reads go through the freshness rule like GORM
// reads; data-modifying CTEs and side-effect functions never go to a
// replica.
func TestRawSQLRouting(t *testing.T) {
	e := newEnv(t)
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	var s served
	if err := e.db.Raw("SELECT name, version, inet_server_port() AS port FROM items WHERE id = ?", 1).Scan(&s).Error; err != nil {
		t.Fatal(err)
	}
	e.mustReplica(s, "raw read, replicas caught up")

	e.pauseAll()
	if err := setName(e.db, 1); err != nil {
		t.Fatal(err)
	}
	s = served{}
	if err := e.db.Raw("SELECT name, version, inet_server_port() AS port FROM public.items WHERE id = ?", 1).Scan(&s).Error; err != nil {
		t.Fatal(err)
	}
	if s.Name != "new" {
		t.Fatalf("STALE READ through raw SQL: %+v", s)
	}
	e.mustPrimary(s, "raw read of the written table")
	var o served
	if err := e.db.Raw("SELECT note AS name, inet_server_port() AS port FROM others WHERE id = 1").Scan(&o).Error; err != nil {
		t.Fatal(err)
	}
	e.mustReplica(o, "raw read of an untouched table")

	// A data-modifying CTE is a write (a replica would refuse it anyway).
	var n int
	if err := e.db.Raw("WITH u AS (UPDATE others SET note = 'cte' WHERE id = 1 RETURNING 1) SELECT count(*) FROM u").Scan(&n).Error; err != nil || n != 1 {
		t.Fatalf("CTE write: n=%d err=%v", n, err)
	}
	if got := e.readOther(e.db); got.Name != "cte" {
		t.Fatalf("STALE READ after a data-modifying CTE: %+v", got)
	}
}

// TestMaxWait: with MaxWait, a read that no replica can serve yet waits for
// one to catch up instead of going to the primary.
func TestMaxWait(t *testing.T) {
	checkWaitedRead(t, newEnv(t, withConfig(withMaxWait)))
}

func withMaxWait(c *plugin.Config) { c.MaxWait = 10 * time.Second }

// checkWaitedRead writes with replay paused, resumes replay on every
// replica 300 ms later, and reads at once: with MaxWait the read waits and
// is served, fresh, by a replica.
func checkWaitedRead(t *testing.T, e *env) {
	t.Helper()
	e.staleOnReplicas()
	go func() {
		time.Sleep(300 * time.Millisecond)
		for i := 0; i < e.c.replicas(); i++ {
			_ = e.c.resume(context.Background(), i)
		}
	}()
	got := e.readItem(e.db, 1)
	if got.Name != "new" {
		t.Fatalf("STALE READ with MaxWait: %+v", got)
	}
	e.mustReplica(got, "read that waited for a replica")
}
