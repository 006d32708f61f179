package plugin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns a Prometheus collector of the plugin's metrics, for the
// caller to register (prometheus.MustRegister(p.Collector())):
//
//	freshread_decisions_total{target,reason}   routing decisions
//	freshread_store_read_seconds                store latency on the read path (histogram)
//	freshread_replica_replay_lag_bytes{replica} how far the replica's position is behind the primary's, at the last poll
//	                                            (WAL bytes on PostgreSQL; transactions, summed over GTID domains or
//	                                            sources, on MariaDB and MySQL; counter steps with heartbeats)
//	freshread_replica_up{replica}               1 when the replica is usable
//	freshread_replica_replicating{replica}      MariaDB and MySQL: 1 when both replication threads run, 0 when not
//	freshread_unpublished_writes                1 while writes wait to be published (this process reads from the primary)
//	freshread_store_discontinuities_total       times the position store was found to have lost positions (restart, flush, failover, eviction)
//	freshread_overlap_discarded_total           replica queries started before the store answered whose rows were discarded (Config.SequentialLookup)
//	freshread_store_eviction_possible           1 when the store's Redis may evict position keys (maxmemory with an evicting policy), 0 when not; absent when unknown
//	freshread_fallbacks_refused_total{reason}   reads refused by Config.MaxFallbackRate (ErrFallbackLimited), by the
//	                                            reason they would have gone to the primary
//	freshread_reads_unknown_tables_total        reads whose tables could not all be named (a join or FROM written as SQL, raw SQL the
//	                                            classifier cannot name every table of): they waited for the database-wide position
func (p *Plugin) Collector() prometheus.Collector { return collector{p} }

var (
	descRefused     = prometheus.NewDesc("freshread_fallbacks_refused_total", "Reads refused by Config.MaxFallbackRate, by the reason they would have gone to the primary.", []string{"reason"}, nil)
	descDecisions   = prometheus.NewDesc("freshread_decisions_total", "Routing decisions by target and reason.", []string{"target", "reason"}, nil)
	descStore       = prometheus.NewDesc("freshread_store_read_seconds", "Latency of the position store on the read path.", nil, nil)
	descLag         = prometheus.NewDesc("freshread_replica_replay_lag_bytes", "How far the replica's position is behind the primary's at the last poll: WAL bytes on PostgreSQL, transactions on MariaDB and MySQL.", []string{"replica"}, nil)
	descReplicating = prometheus.NewDesc("freshread_replica_replicating", "MariaDB and MySQL: 1 when the replica's I/O and SQL threads both run.", []string{"replica"}, nil)
	descUp          = prometheus.NewDesc("freshread_replica_up", "1 when the replica is usable for reads.", []string{"replica"}, nil)
	descPending     = prometheus.NewDesc("freshread_unpublished_writes", "1 while writes wait to be published to the store.", nil, nil)
	descLosses      = prometheus.NewDesc("freshread_store_discontinuities_total", "Times the position store was found to have lost positions (restart, flush, failover, eviction).", nil, nil)
	descDiscarded   = prometheus.NewDesc("freshread_overlap_discarded_total", "Replica queries started before the store answered whose rows were discarded because the replica turned out not to be fresh enough.", nil, nil)
	descEviction    = prometheus.NewDesc("freshread_store_eviction_possible", "1 when the position store's Redis may evict position keys (maxmemory with an evicting policy).", nil, nil)
	descUnknown     = prometheus.NewDesc("freshread_reads_unknown_tables_total", "Reads whose tables could not all be named; they waited for the database-wide position.", nil, nil)
)

type collector struct{ p *Plugin }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descDecisions
	ch <- descStore
	ch <- descLag
	ch <- descUp
	ch <- descReplicating
	ch <- descPending
	ch <- descLosses
	ch <- descDiscarded
	ch <- descEviction
	ch <- descUnknown
	ch <- descRefused
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	p := c.p
	for t := range p.stats.decisions {
		for i, r := range reasons {
			if n := p.stats.decisions[t][i].Load(); n > 0 {
				ch <- prometheus.MustNewConstMetric(descDecisions, prometheus.CounterValue, float64(n), Target(t).String(), string(r))
			}
		}
	}
	for i, r := range reasons {
		if n := p.stats.refused[i].Load(); n > 0 {
			ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(n), string(r))
		}
	}
	buckets := make(map[float64]uint64, len(storeBucketBounds))
	var cum uint64
	for i, b := range storeBucketBounds {
		cum += p.stats.storeBuckets[i].Load()
		buckets[b.Seconds()] = cum
	}
	ch <- prometheus.MustNewConstHistogram(descStore, p.stats.storeCount.Load(),
		float64(p.stats.storeSumNano.Load())/1e9, buckets)
	primary := p.lastPrimary.Load()
	now := time.Now()
	for _, r := range p.replicas {
		st := r.state.Load()
		up := 0.0
		if st.usable(now, p.cfg.MaxLag) {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up, r.name)
		if s := r.replicating.Load(); s != replicatingUnknown {
			v := 0.0
			if s == replicatingYes {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descReplicating, prometheus.GaugeValue, v, r.name)
		}
		if st != nil && st.up && primary != nil && !primary.IsZero() {
			lag := float64(st.pos.Lag(*primary))
			ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, lag, r.name)
		}
	}
	pending := 0.0
	if p.pending.suspect.Load() {
		pending = 1
	}
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, pending)
	ch <- prometheus.MustNewConstMetric(descLosses, prometheus.CounterValue, float64(p.stats.discontinuities.Load()))
	ch <- prometheus.MustNewConstMetric(descDiscarded, prometheus.CounterValue, float64(p.stats.overlapDiscarded.Load()))
	ch <- prometheus.MustNewConstMetric(descUnknown, prometheus.CounterValue, float64(p.stats.unknownTables.Load()))
	switch p.evictionRisk.Load() {
	case evictionYes:
		ch <- prometheus.MustNewConstMetric(descEviction, prometheus.GaugeValue, 1)
	case evictionNo:
		ch <- prometheus.MustNewConstMetric(descEviction, prometheus.GaugeValue, 0)
	}
}
