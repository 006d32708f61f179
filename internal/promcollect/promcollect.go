package promcollect

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/freshread/freshread/internal/metrics"
	"github.com/freshread/freshread/lsnstore"
)

var descDenied = metrics.NewDesc("freshread_store_denied_total",
	"Redis commands refused to the client's user (NOPERM, or inside a script) in this process, by command.", []string{"command"})

// Denied is the metrics.Source of lsnstore.DeniedCommands:
// freshread_store_denied_total{command}.
type Denied struct{}

func (Denied) Describe(emit func(*metrics.Desc)) { emit(descDenied) }

func (Denied) Collect(emit func(metrics.Sample)) {
	for command, n := range lsnstore.DeniedCommands() {
		emit(metrics.Counter(descDenied, float64(n), command))
	}
}

// collector is the prometheus.Collector of a metrics.Source.
type collector struct {
	src   metrics.Source
	descs map[*metrics.Desc]*prometheus.Desc
}

// New returns the prometheus.Collector of src.
func New(src metrics.Source) prometheus.Collector {
	c := &collector{src: src, descs: make(map[*metrics.Desc]*prometheus.Desc)}
	src.Describe(func(d *metrics.Desc) {
		c.descs[d] = prometheus.NewDesc(d.Name, d.Help, d.Labels, nil)
	})
	return c
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	c.src.Describe(func(d *metrics.Desc) { ch <- c.descs[d] })
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.src.Collect(func(s metrics.Sample) {
		d, ok := c.descs[s.Desc]
		if !ok {
			return // not described: Describe and Collect disagree
		}
		switch s.Type {
		case metrics.CounterType:
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, s.Value, s.Labels...)
		case metrics.GaugeType:
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, s.Value, s.Labels...)
		case metrics.HistogramType:
			ch <- prometheus.MustNewConstHistogram(d, s.Count, s.Sum, s.Buckets, s.Labels...)
		}
	})
}
