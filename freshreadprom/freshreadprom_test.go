package freshreadprom_test

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/freshread/freshread/freshreadprom"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/sharding"
)

// TestPlugin: the plugin's collector passes a pedantic registry's checks
// (every metric collected is described, consistently) before the plugin
// is installed too.
func TestPlugin(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(freshreadprom.Plugin(plugin.New(plugin.Config{})))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := make(map[string]bool)
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, n := range []string{"freshread_store_read_seconds", "freshread_unpublished_writes", "freshread_writes_fenced_total"} {
		if !names[n] {
			t.Errorf("%s not gathered (gathered %v)", n, names)
		}
	}
}

// TestDenied: Denied is registered once per process; a second
// registration is AlreadyRegisteredError.
func TestDenied(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(freshreadprom.Denied())
	var are prometheus.AlreadyRegisteredError
	if err := reg.Register(freshreadprom.Denied()); !errors.As(err, &are) {
		t.Fatalf("second registration: %v, want AlreadyRegisteredError", err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

// TestSharding: the sharding plugin's collector passes a pedantic
// registry's checks before the plugin is installed (map version 0, no
// lease without Config.Map), with every counter at zero.
func TestSharding(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(freshreadprom.Sharding(sharding.New(sharding.Config{})))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]float64)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			got[f.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for _, n := range []string{"freshread_sharding_map_version", "freshread_sharding_map_refresh_errors_total",
		"freshread_sharding_map_stale_refusals_total", "freshread_sharding_bucket_moved_total", "freshread_sharding_bucket_moved_retries_total"} {
		if v, ok := got[n]; !ok || v != 0 {
			t.Errorf("%s: %v (gathered: %v), want 0", n, v, ok)
		}
	}
	if _, ok := got["freshread_sharding_map_lease_seconds"]; ok {
		t.Error("freshread_sharding_map_lease_seconds gathered without Config.Map")
	}
}
