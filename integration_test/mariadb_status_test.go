package integration_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/freshread/freshread/freshreadprom"
	"github.com/freshread/freshread/plugin"
)

// gauge returns the value of the gauge name for replica r0 in reg, and
// whether it is reported at all.
func gauge(t *testing.T, reg *prometheus.Registry, name string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "replica" && l.GetValue() == replicaName(0) {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// TestMariaDBReplicationStatus: the plugin reads SHOW SLAVE STATUS. When
// the replica's SQL thread stops, the log says so (with the thread states)
// and freshread_replica_replicating drops to 0, while the replica keeps
// serving the reads it has applied; after START SLAVE SQL_THREAD the gauge
// is 1 again.
func TestMariaDBReplicationStatus(t *testing.T) {
	var logs syncBuffer
	e := newMariaEnv(t, withConfig(func(c *plugin.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}))
	reg := prometheus.NewRegistry()
	if err := reg.Register(freshreadprom.Plugin(e.plug)); err != nil {
		t.Fatal(err)
	}
	waitGauge := func(want float64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if v, ok := gauge(t, reg, "freshread_replica_replicating"); ok && v == want {
				return
			}
			if time.Now().After(deadline) {
				v, ok := gauge(t, reg, "freshread_replica_replicating")
				t.Fatalf("freshread_replica_replicating = %v (reported %v); want %v; log: %s", v, ok, want, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitLog := func(want ...string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			log, found := logs.String(), 0
			for _, w := range want {
				if strings.Contains(log, w) {
					found++
				}
			}
			if found == len(want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the log does not say %q; log: %s", want, log)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitGauge(1)
	e.pauseAll()
	waitGauge(0)
	// The gauge changes just before the line is logged.
	waitLog("replica is not replicating", "Slave_SQL_Running: No")
	e.mustReplica(e.readOther(e.db), "read of a table the stopped replica has applied")
	e.resumeAll()
	waitGauge(1)
	waitLog("replicating again")
}
