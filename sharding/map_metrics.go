package sharding

import (
	"time"

	"github.com/freshread/freshread/internal/metrics"
)

// The bucket-map metrics, exported to Prometheus by
// freshreadprom.Sharding(s) (this package does not link the Prometheus
// client):
//
//	freshread_sharding_map_version              the version of the bucket map routing uses (0: Config's)
//	freshread_sharding_map_lease_seconds        how much of the map lease is left (negative: run out, sharded
//	                                            statements are refused); absent without Config.Map
//	freshread_sharding_map_refresh_errors_total refreshes that failed (store unreachable, refused map, ack failed)
//	freshread_sharding_map_stale_refusals_total statements refused with ErrMapStale
//	freshread_sharding_bucket_moved_total       statements a shard refused with the guard's error (ErrBucketMoved)
//	freshread_sharding_bucket_moved_retries_total times such a statement was routed again with a refreshed map

func init() {
	metrics.ShardingSource = func(s any) metrics.Source { return mapMetrics{s.(*Sharding)} }
}

var (
	descMapVersion    = metrics.NewDesc("freshread_sharding_map_version", "Version of the bucket map routing uses (0: the map built from Config).", nil)
	descMapLease      = metrics.NewDesc("freshread_sharding_map_lease_seconds", "Time left on the bucket map lease; negative once it has run out (sharded statements are refused).", nil)
	descRefreshErrors = metrics.NewDesc("freshread_sharding_map_refresh_errors_total", "Bucket map refreshes that failed (store unreachable, map refused, acknowledgement failed).", nil)
	descStale         = metrics.NewDesc("freshread_sharding_map_stale_refusals_total", "Sharded statements refused because the bucket map lease had run out (ErrMapStale).", nil)
	descBucketMoved   = metrics.NewDesc("freshread_sharding_bucket_moved_total", "Statements a shard refused because it does not own the bucket or its move is switching (ErrBucketMoved).", nil)
	descMoveRetries   = metrics.NewDesc("freshread_sharding_bucket_moved_retries_total", "Times a statement refused with ErrBucketMoved was routed again with a refreshed map.", nil)
)

// mapMetrics is the metrics.Source of a Sharding's bucket-map metrics.
type mapMetrics struct{ s *Sharding }

func (mapMetrics) Describe(emit func(*metrics.Desc)) {
	for _, d := range []*metrics.Desc{descMapVersion, descMapLease, descRefreshErrors, descStale, descBucketMoved, descMoveRetries} {
		emit(d)
	}
}

func (c mapMetrics) Collect(emit func(metrics.Sample)) {
	s := c.s
	var version int64
	if rt := s.rt.Load(); rt != nil {
		version = rt.version
	}
	emit(metrics.Gauge(descMapVersion, float64(version)))
	if f := s.fol; f != nil {
		left := -f.lease
		if ls := f.leaseStart.Load(); ls != never {
			left = f.lease - time.Duration(monoNow()-ls)
		}
		emit(metrics.Gauge(descMapLease, left.Seconds()))
	}
	emit(metrics.Counter(descRefreshErrors, float64(s.stats.refreshErrors.Load())))
	emit(metrics.Counter(descStale, float64(s.stats.staleRefusals.Load())))
	emit(metrics.Counter(descBucketMoved, float64(s.stats.bucketMoved.Load())))
	emit(metrics.Counter(descMoveRetries, float64(s.stats.retries.Load())))
}
