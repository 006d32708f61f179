package integration_test

import (
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/plugin"
)

// checkFallbackLimit: with Config.MaxFallbackRate, reads that no replica
// can serve fresh (replay paused behind a write) go to the primary up to
// the burst, fresh, and the next is refused with ErrFallbackLimited; a
// read that needs the primary (in a transaction) and a read a replica can
// serve are not refused; once the replicas catch up the read is served
// by a replica, fresh.
func checkFallbackLimit(t *testing.T, newEnv func(*testing.T, ...envOpt) *env) {
	e := newEnv(t)
	// One fallback read per 100 s after a burst of two: the third read
	// comes long before the next is allowed. A process that just started
	// waits for replicas past the primary's position at its start, which
	// other tests' writes on the shared cluster move: until one whose
	// first read (of an untouched table) a replica serves, hence with its
	// burst whole, processes are started again.
	e.waitReplicaServes(e.db)
	var (
		b  *gorm.DB
		bp *plugin.Plugin
	)
	deadline := time.Now().Add(15 * time.Second)
	for {
		b, bp = e.open(withConfig(func(c *plugin.Config) { c.MaxFallbackRate = 0.01; c.FallbackBurst = 2 }))
		var o served
		err := b.Model(&Other{}).Select("note AS name, 0 AS version, " + e.c.portExpr() + " AS port").Where("id = 1").Scan(&o).Error
		if err == nil && e.isReplica(o.Port) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process started in 15 s read an untouched table from a replica: %+v, %v", o, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.staleOnReplicas()
	for i := range 2 {
		got := e.readItem(b, 1)
		if got.Name != "new" {
			t.Fatalf("STALE READ %d: %+v", i, got)
		}
		e.mustPrimary(got, "a fallback read within the burst")
	}
	var s served
	err := b.Model(&Item{}).Select("name, version, "+e.c.portExpr()+" AS port").Where("id = ?", 1).Scan(&s).Error
	if !plugin.IsFallbackLimited(err) {
		t.Fatalf("a fallback read beyond the limit: %+v, %v; want ErrFallbackLimited", s, err)
	}
	t.Logf("refused: %v", err)
	if n := pluginMetric(t, bp, "freshread_fallbacks_refused_total"); n != 1 {
		t.Fatalf("freshread_fallbacks_refused_total = %v, want 1", n)
	}
	if err := b.Transaction(func(tx *gorm.DB) error {
		got := e.readItem(tx, 1)
		if got.Name != "new" {
			t.Errorf("STALE READ in a transaction: %+v", got)
		}
		e.mustPrimary(got, "a read in a transaction")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	e.mustReplica(e.readOther(b), "a read of an untouched table")

	e.resumeAll()
	deadline = time.Now().Add(15 * time.Second)
	for {
		var got served
		err := b.Model(&Item{}).Select("name, version, "+e.c.portExpr()+" AS port").Where("id = ?", 1).Scan(&got).Error
		if err == nil {
			if got.Name != "new" {
				t.Fatalf("STALE READ after the catch-up: %+v", got)
			}
			if e.isReplica(got.Port) {
				break
			}
		} else if !plugin.IsFallbackLimited(err) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("reads of the written row never reached a replica after the catch-up")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestFallbackLimit(t *testing.T)        { checkFallbackLimit(t, newEnv) }
func TestMariaDBFallbackLimit(t *testing.T) { checkFallbackLimit(t, newMariaEnv) }
