package tracker

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/freshread/freshread/lsnstore"
)

// TestMetricsRegisterDenied: the tracker's metrics include the Redis
// refusals (lsnstore.DeniedCollector), and a registry that already holds
// that collector (registered beside a plugin's) takes the tracker's
// metrics without a panic.
func TestMetricsRegisterDenied(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	newMetrics(reg)
	var are prometheus.AlreadyRegisteredError
	if err := reg.Register(lsnstore.DeniedCollector()); !errors.As(err, &are) {
		t.Fatalf("registering lsnstore.DeniedCollector after the tracker's metrics: %v, want AlreadyRegisteredError (the tracker does not export freshread_store_denied_total)", err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}

	shared := prometheus.NewPedanticRegistry()
	shared.MustRegister(lsnstore.DeniedCollector())
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("the tracker's metrics on a registry that has lsnstore.DeniedCollector panicked: %v", r)
			}
		}()
		newMetrics(shared)
	}()
	if _, err := shared.Gather(); err != nil {
		t.Fatal(err)
	}
}
