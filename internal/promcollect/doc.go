// Package promcollect turns an internal/metrics.Source into a
// prometheus.Collector. freshreadprom uses it, and the tracker, which
// exports the position store's refusals without linking the plugin.
package promcollect
