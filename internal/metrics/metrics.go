package metrics

// Type is a metric's type.
type Type int

const (
	// CounterType is a counter.
	CounterType Type = iota
	// GaugeType is a gauge.
	GaugeType
	// HistogramType is a histogram.
	HistogramType
)

// Desc describes a metric: its name, help text and variable labels.
type Desc struct {
	Name   string
	Help   string
	Labels []string
}

// NewDesc returns the Desc of name.
func NewDesc(name, help string, labels []string) *Desc {
	return &Desc{Name: name, Help: help, Labels: labels}
}

// Sample is one value of a metric.
type Sample struct {
	Desc   *Desc
	Type   Type
	Value  float64  // counters and gauges
	Labels []string // the values of Desc.Labels
	// Histograms: the count, the sum and the cumulative count of each
	// bucket by its upper bound.
	Count   uint64
	Sum     float64
	Buckets map[float64]uint64
}

// Counter is a counter's sample.
func Counter(d *Desc, v float64, labels ...string) Sample {
	return Sample{Desc: d, Type: CounterType, Value: v, Labels: labels}
}

// Gauge is a gauge's sample.
func Gauge(d *Desc, v float64, labels ...string) Sample {
	return Sample{Desc: d, Type: GaugeType, Value: v, Labels: labels}
}

// Histogram is a histogram's sample.
func Histogram(d *Desc, count uint64, sum float64, buckets map[float64]uint64) Sample {
	return Sample{Desc: d, Type: HistogramType, Count: count, Sum: sum, Buckets: buckets}
}

// Source is what keeps metrics.
type Source interface {
	// Describe sends the Desc of every metric Collect may send.
	Describe(emit func(*Desc))
	// Collect sends the current samples.
	Collect(emit func(Sample))
}

// PluginSource returns the Source of a *plugin.Plugin; package plugin sets
// it.
var PluginSource func(p any) Source

// ShardingSource returns the Source of a *sharding.Sharding's bucket-map
// metrics; package sharding sets it.
var ShardingSource func(s any) Source
