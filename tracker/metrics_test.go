package tracker

import (
	"errors"
	"testing"

	"github.com/freshread/freshread/freshreadprom"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsRegisterDenied: the tracker's metrics include the Redis
// refusals (freshreadprom.Denied), and a registry that already holds
// that collector (registered beside a plugin's) takes the tracker's
// metrics without a panic.
func TestMetricsRegisterDenied(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	newMetrics(reg)
	var are prometheus.AlreadyRegisteredError
	if err := reg.Register(freshreadprom.Denied()); !errors.As(err, &are) {
		t.Fatalf("registering freshreadprom.Denied after the tracker's metrics: %v, want AlreadyRegisteredError (the tracker does not export freshread_store_denied_total)", err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}

	shared := prometheus.NewPedanticRegistry()
	shared.MustRegister(freshreadprom.Denied())
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("the tracker's metrics on a registry that has freshreadprom.Denied panicked: %v", r)
			}
		}()
		newMetrics(shared)
	}()
	if _, err := shared.Gather(); err != nil {
		t.Fatal(err)
	}
}
