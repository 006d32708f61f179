// Package freshreadprom exports freshread's metrics to Prometheus. The
// plugin and the position store keep their counters without linking
// Prometheus' client (github.com/prometheus/client_golang and, through it,
// protobuf and procfs); a service that exports them imports this package
// and registers its collectors:
//
//	prometheus.MustRegister(freshreadprom.Plugin(p))
//	prometheus.MustRegister(freshreadprom.Denied()) // once per process
//
// The metrics and their meaning are listed in docs/guide/operations.md.
package freshreadprom
