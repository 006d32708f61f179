// Package metrics describes freshread's metrics without naming a metrics
// library, so that a package keeping counters (plugin) does not link
// Prometheus' client: github.com/freshread/freshread/freshreadprom turns
// them into a prometheus.Collector for the services that export them.
package metrics
