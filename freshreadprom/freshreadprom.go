package freshreadprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/freshread/freshread/internal/metrics"
	"github.com/freshread/freshread/internal/promcollect"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/sharding"
)

// Plugin returns a Prometheus collector of p's metrics, for the caller to
// register (prometheus.MustRegister(freshreadprom.Plugin(p))). They are
// listed in docs/guide/operations.md, "Plugin".
func Plugin(p *plugin.Plugin) prometheus.Collector {
	return promcollect.New(metrics.PluginSource(p))
}

// Sharding returns a Prometheus collector of s's bucket-map metrics, for
// the caller to register (prometheus.MustRegister(freshreadprom.Sharding(s))).
// They are listed in docs/guide/operations.md, "Sharding".
func Sharding(s *sharding.Sharding) prometheus.Collector {
	return promcollect.New(metrics.ShardingSource(s))
}

// Denied returns a Prometheus collector of lsnstore.DeniedCommands, for
// the caller to register once per process
// (prometheus.MustRegister(freshreadprom.Denied())):
//
//	freshread_store_denied_total{command}   Redis commands refused to the client's user (NOPERM, or inside a
//	                                        script), by command, on every watched client of the process
//	                                        (lsnstore.WatchRedis): the first refusal of each is logged as an ERROR
func Denied() prometheus.Collector { return promcollect.New(promcollect.Denied{}) }
