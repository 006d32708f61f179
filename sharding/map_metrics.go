package sharding

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns a Prometheus collector of the plugin's bucket-map
// metrics, for the caller to register (prometheus.MustRegister(s.Collector())):
//
//	freshread_sharding_map_version              the version of the bucket map routing uses (0: Config's)
//	freshread_sharding_map_lease_seconds        how much of the map lease is left (negative: run out, sharded
//	                                            statements are refused); absent without Config.Map
//	freshread_sharding_map_refresh_errors_total refreshes that failed (store unreachable, refused map, ack failed)
//	freshread_sharding_map_stale_refusals_total statements refused with ErrMapStale
//	freshread_sharding_bucket_moved_total       statements a shard refused with the guard's error (ErrBucketMoved)
//	freshread_sharding_bucket_moved_retries_total times such a statement was routed again with a refreshed map
func (s *Sharding) Collector() prometheus.Collector { return mapCollector{s} }

var (
	descMapVersion    = prometheus.NewDesc("freshread_sharding_map_version", "Version of the bucket map routing uses (0: the map built from Config).", nil, nil)
	descMapLease      = prometheus.NewDesc("freshread_sharding_map_lease_seconds", "Time left on the bucket map lease; negative once it has run out (sharded statements are refused).", nil, nil)
	descRefreshErrors = prometheus.NewDesc("freshread_sharding_map_refresh_errors_total", "Bucket map refreshes that failed (store unreachable, map refused, acknowledgement failed).", nil, nil)
	descStale         = prometheus.NewDesc("freshread_sharding_map_stale_refusals_total", "Sharded statements refused because the bucket map lease had run out (ErrMapStale).", nil, nil)
	descBucketMoved   = prometheus.NewDesc("freshread_sharding_bucket_moved_total", "Statements a shard refused because it does not own the bucket or its move is switching (ErrBucketMoved).", nil, nil)
	descMoveRetries   = prometheus.NewDesc("freshread_sharding_bucket_moved_retries_total", "Times a statement refused with ErrBucketMoved was routed again with a refreshed map.", nil, nil)
)

type mapCollector struct{ s *Sharding }

func (c mapCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descMapVersion
	ch <- descMapLease
	ch <- descRefreshErrors
	ch <- descStale
	ch <- descBucketMoved
	ch <- descMoveRetries
}

func (c mapCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	var version int64
	if rt := s.rt.Load(); rt != nil {
		version = rt.version
	}
	ch <- prometheus.MustNewConstMetric(descMapVersion, prometheus.GaugeValue, float64(version))
	if f := s.fol; f != nil {
		left := -f.lease
		if ls := f.leaseStart.Load(); ls != never {
			left = f.lease - time.Duration(monoNow()-ls)
		}
		ch <- prometheus.MustNewConstMetric(descMapLease, prometheus.GaugeValue, left.Seconds())
	}
	ch <- prometheus.MustNewConstMetric(descRefreshErrors, prometheus.CounterValue, float64(s.stats.refreshErrors.Load()))
	ch <- prometheus.MustNewConstMetric(descStale, prometheus.CounterValue, float64(s.stats.staleRefusals.Load()))
	ch <- prometheus.MustNewConstMetric(descBucketMoved, prometheus.CounterValue, float64(s.stats.bucketMoved.Load()))
	ch <- prometheus.MustNewConstMetric(descMoveRetries, prometheus.CounterValue, float64(s.stats.retries.Load()))
}
