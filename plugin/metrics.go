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
//	freshread_writes_fenced_total               writes refused before they committed because this process's lease in the store
//	                                            ended (ErrStoreUnreachable: Redis unreachable from this process)
//	freshread_writes_unprotected_total          committed writes neither published, nor announced, nor covered by the lease:
//	                                            other processes may read them stale (docs/design/reliability.md)
//	freshread_reads_unknown_tables_total        reads whose tables could not all be named (a join or FROM written as SQL, raw SQL the
//	                                            classifier cannot name every table of): they waited for the database-wide position
//	freshread_session_tokens_ignored_total{reason} session tokens, or their position on this database, ignored: bad-signature
//	                                            (MiddlewareConfig.Keys set, no valid MAC), malformed, beyond-primary (a position
//	                                            past the primary's), other-database (positions of other databases only: normal in
//	                                            an application with several), future-write-time; counted by the first read routed
//	freshread_session_fallbacks_refused_total   fallbacks caused by a session token refused by the sessions' half of
//	                                            Config.MaxFallbackRate (also counted in freshread_fallbacks_refused_total)
//	freshread_replica_set_changes_total         changes of the replicas (SetReplicas, Config.Discovery)
//	freshread_discovery_failures_total          Config.Discovery lookups that failed or found no replica (the replicas were kept)
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
	descSetChanges  = prometheus.NewDesc("freshread_replica_set_changes_total", "Changes of the replicas (SetReplicas, Config.Discovery).", nil, nil)
	descDiscovery   = prometheus.NewDesc("freshread_discovery_failures_total", "Config.Discovery lookups that failed or found no replica; the replicas were kept.", nil, nil)
)

// The session token descriptors (session_cap.go).
var (
	descTokens       = prometheus.NewDesc("freshread_session_tokens_ignored_total", "Session tokens, or their position on this database, ignored, by reason.", []string{"reason"}, nil)
	descTokenRefused = prometheus.NewDesc("freshread_session_fallbacks_refused_total", "Fallbacks caused by a session token refused by the sessions' share of Config.MaxFallbackRate.", nil, nil)
	descResting      = prometheus.NewDesc("freshread_poller_resting", "1 while the poller rests for want of reads and writes (Config.IdleAfter): the replica gauges are those of its last poll.", nil, nil)
	descRests        = prometheus.NewDesc("freshread_poller_rests_total", "Times the poller began to rest for want of reads and writes (Config.IdleAfter).", nil, nil)
	descLeading      = prometheus.NewDesc("freshread_poller_leading", "1 while this process holds the poller's lease and polls for the processes sharing its store (Config.PollerLease).", nil, nil)
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
	ch <- descFenced
	ch <- descUnprotected
	ch <- descRefused
	ch <- descTokens
	ch <- descTokenRefused
	ch <- descResting
	ch <- descRests
	ch <- descLeading
	ch <- descSetChanges
	ch <- descDiscovery
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
	for i, r := range ignoredReasons {
		if n := p.sessions.ignored[i].Load(); n > 0 {
			ch <- prometheus.MustNewConstMetric(descTokens, prometheus.CounterValue, float64(n), r)
		}
	}
	if p.fallbacks != nil {
		ch <- prometheus.MustNewConstMetric(descTokenRefused, prometheus.CounterValue, float64(p.sessions.refused.Load()))
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
	for _, r := range p.replicas() {
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
	ch <- prometheus.MustNewConstMetric(descResting, prometheus.GaugeValue, boolGauge(p.resting.Load()))
	ch <- prometheus.MustNewConstMetric(descRests, prometheus.CounterValue, float64(p.stats.rests.Load()))
	ch <- prometheus.MustNewConstMetric(descLeading, prometheus.GaugeValue, boolGauge(p.leading.Load()))
	ch <- prometheus.MustNewConstMetric(descLosses, prometheus.CounterValue, float64(p.stats.discontinuities.Load()))
	ch <- prometheus.MustNewConstMetric(descDiscarded, prometheus.CounterValue, float64(p.stats.overlapDiscarded.Load()))
	ch <- prometheus.MustNewConstMetric(descUnknown, prometheus.CounterValue, float64(p.stats.unknownTables.Load()))
	ch <- prometheus.MustNewConstMetric(descSetChanges, prometheus.CounterValue, float64(p.stats.replicaSetChanges.Load()))
	if p.cfg.Discovery != nil {
		ch <- prometheus.MustNewConstMetric(descDiscovery, prometheus.CounterValue, float64(p.stats.discoveryFailures.Load()))
	}
	ch <- prometheus.MustNewConstMetric(descFenced, prometheus.CounterValue, float64(p.stats.fencedWrites.Load()))
	ch <- prometheus.MustNewConstMetric(descUnprotected, prometheus.CounterValue, float64(p.stats.unprotectedWrites.Load()))
	switch p.evictionRisk.Load() {
	case evictionYes:
		ch <- prometheus.MustNewConstMetric(descEviction, prometheus.GaugeValue, 1)
	case evictionNo:
		ch <- prometheus.MustNewConstMetric(descEviction, prometheus.GaugeValue, 0)
	}
}

// boolGauge is a gauge's value for b: 1 or 0.
func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
