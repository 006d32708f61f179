package lsnstore

import "github.com/prometheus/client_golang/prometheus"

// DeniedCollector returns a Prometheus collector of DeniedCommands, for
// the caller to register once per process
// (prometheus.MustRegister(lsnstore.DeniedCollector())):
//
//	freshread_store_denied_total{command}   Redis commands refused to the client's user (NOPERM, or inside a
//	                                        script), by command, on every watched client of the process
//	                                        (WatchRedis): the first refusal of each is logged as an ERROR
func DeniedCollector() prometheus.Collector { return deniedCollector{} }

var descDenied = prometheus.NewDesc("freshread_store_denied_total",
	"Redis commands refused to the client's user (NOPERM, or inside a script) in this process, by command.", []string{"command"}, nil)

type deniedCollector struct{}

func (deniedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descDenied }

func (deniedCollector) Collect(ch chan<- prometheus.Metric) {
	for command, n := range DeniedCommands() {
		ch <- prometheus.MustNewConstMetric(descDenied, prometheus.CounterValue, float64(n), command)
	}
}
