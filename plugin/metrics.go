package plugin

import (
	"time"

	"github.com/freshread/freshread/internal/metrics"
)

// The plugin's metrics, which freshreadprom.Plugin(p) collects for
// Prometheus (the plugin does not link Prometheus' client):
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
//	freshread_lapsed_writer_connections_ended_total primary connections of processes whose lease in the store lapsed, ended
//	                                            before this process took its floor (writer tags, PostgreSQL)
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
func init() {
	metrics.PluginSource = func(p any) metrics.Source { return collector{p.(*Plugin)} }
}

var (
	descRefused     = metrics.NewDesc("freshread_fallbacks_refused_total", "Reads refused by Config.MaxFallbackRate, by the reason they would have gone to the primary.", []string{"reason"})
	descDecisions   = metrics.NewDesc("freshread_decisions_total", "Routing decisions by target and reason.", []string{"target", "reason"})
	descStore       = metrics.NewDesc("freshread_store_read_seconds", "Latency of the position store on the read path.", nil)
	descLag         = metrics.NewDesc("freshread_replica_replay_lag_bytes", "How far the replica's position is behind the primary's at the last poll: WAL bytes on PostgreSQL, transactions on MariaDB and MySQL.", []string{"replica"})
	descReplicating = metrics.NewDesc("freshread_replica_replicating", "MariaDB and MySQL: 1 when the replica's I/O and SQL threads both run.", []string{"replica"})
	descUp          = metrics.NewDesc("freshread_replica_up", "1 when the replica is usable for reads.", []string{"replica"})
	descPending     = metrics.NewDesc("freshread_unpublished_writes", "1 while writes wait to be published to the store.", nil)
	descLosses      = metrics.NewDesc("freshread_store_discontinuities_total", "Times the position store was found to have lost positions (restart, flush, failover, eviction).", nil)
	descDiscarded   = metrics.NewDesc("freshread_overlap_discarded_total", "Replica queries started before the store answered whose rows were discarded because the replica turned out not to be fresh enough.", nil)
	descEviction    = metrics.NewDesc("freshread_store_eviction_possible", "1 when the position store's Redis may evict position keys (maxmemory with an evicting policy).", nil)
	descUnknown     = metrics.NewDesc("freshread_reads_unknown_tables_total", "Reads whose tables could not all be named; they waited for the database-wide position.", nil)
	descSetChanges  = metrics.NewDesc("freshread_replica_set_changes_total", "Changes of the replicas (SetReplicas, Config.Discovery).", nil)
	descDiscovery   = metrics.NewDesc("freshread_discovery_failures_total", "Config.Discovery lookups that failed or found no replica; the replicas were kept.", nil)
)

// The session token descriptors (session_cap.go).
var (
	descTokens       = metrics.NewDesc("freshread_session_tokens_ignored_total", "Session tokens, or their position on this database, ignored, by reason.", []string{"reason"})
	descTokenRefused = metrics.NewDesc("freshread_session_fallbacks_refused_total", "Fallbacks caused by a session token refused by the sessions' share of Config.MaxFallbackRate.", nil)
	descResting      = metrics.NewDesc("freshread_poller_resting", "1 while the poller rests for want of reads and writes (Config.IdleAfter): the replica gauges are those of its last poll.", nil)
	descRests        = metrics.NewDesc("freshread_poller_rests_total", "Times the poller began to rest for want of reads and writes (Config.IdleAfter).", nil)
	descPolls        = metrics.NewDesc("freshread_polls_total", "Polls the poller finished: of the servers, or of the shared poll's snapshot while another process holds its lease. Still while it rests.", nil)
	descLeading      = metrics.NewDesc("freshread_poller_leading", "1 while this process holds the poller's lease and polls for the processes sharing its store (Config.PollerLease).", nil)
)

type collector struct{ p *Plugin }

func (c collector) Describe(emit func(*metrics.Desc)) {
	emit(descDecisions)
	emit(descStore)
	emit(descLag)
	emit(descUp)
	emit(descReplicating)
	emit(descPending)
	emit(descLosses)
	emit(descDiscarded)
	emit(descEviction)
	emit(descUnknown)
	emit(descFenced)
	emit(descUnprotected)
	emit(descLapsedEnded)
	emit(descRefused)
	emit(descTokens)
	emit(descTokenRefused)
	emit(descResting)
	emit(descRests)
	emit(descPolls)
	emit(descLeading)
	emit(descSetChanges)
	emit(descDiscovery)
}

func (c collector) Collect(emit func(metrics.Sample)) {
	p := c.p
	for t := range p.stats.decisions {
		for i, r := range reasons {
			if n := p.stats.decisions[t][i].Load(); n > 0 {
				emit(metrics.Counter(descDecisions, float64(n), Target(t).String(), string(r)))
			}
		}
	}
	for i, r := range reasons {
		if n := p.stats.refused[i].Load(); n > 0 {
			emit(metrics.Counter(descRefused, float64(n), string(r)))
		}
	}
	for i, r := range ignoredReasons {
		if n := p.sessions.ignored[i].Load(); n > 0 {
			emit(metrics.Counter(descTokens, float64(n), r))
		}
	}
	if p.fallbacks != nil {
		emit(metrics.Counter(descTokenRefused, float64(p.sessions.refused.Load())))
	}
	buckets := make(map[float64]uint64, len(storeBucketBounds))
	var cum uint64
	for i, b := range storeBucketBounds {
		cum += p.stats.storeBuckets[i].Load()
		buckets[b.Seconds()] = cum
	}
	emit(metrics.Histogram(descStore, p.stats.storeCount.Load(),
		float64(p.stats.storeSumNano.Load())/1e9, buckets))
	primary := p.lastPrimary.Load()
	now := time.Now()
	for _, r := range p.replicas() {
		st := r.state.Load()
		up := 0.0
		if st.usable(now, p.cfg.MaxLag) {
			up = 1
		}
		emit(metrics.Gauge(descUp, up, r.name))
		if s := r.replicating.Load(); s != replicatingUnknown {
			v := 0.0
			if s == replicatingYes {
				v = 1
			}
			emit(metrics.Gauge(descReplicating, v, r.name))
		}
		if st != nil && st.up && primary != nil && !primary.IsZero() {
			lag := float64(st.pos.Lag(*primary))
			emit(metrics.Gauge(descLag, lag, r.name))
		}
	}
	pending := 0.0
	if p.pending.suspect.Load() {
		pending = 1
	}
	emit(metrics.Gauge(descPending, pending))
	emit(metrics.Gauge(descResting, boolGauge(p.resting.Load())))
	emit(metrics.Counter(descRests, float64(p.stats.rests.Load())))
	emit(metrics.Counter(descPolls, float64(p.stats.polls.Load())))
	emit(metrics.Gauge(descLeading, boolGauge(p.leading.Load())))
	emit(metrics.Counter(descLosses, float64(p.stats.discontinuities.Load())))
	emit(metrics.Counter(descDiscarded, float64(p.stats.overlapDiscarded.Load())))
	emit(metrics.Counter(descUnknown, float64(p.stats.unknownTables.Load())))
	emit(metrics.Counter(descSetChanges, float64(p.stats.replicaSetChanges.Load())))
	if p.cfg.Discovery != nil {
		emit(metrics.Counter(descDiscovery, float64(p.stats.discoveryFailures.Load())))
	}
	emit(metrics.Counter(descFenced, float64(p.stats.fencedWrites.Load())))
	emit(metrics.Counter(descUnprotected, float64(p.stats.unprotectedWrites.Load())))
	emit(metrics.Counter(descLapsedEnded, float64(p.stats.lapsedConnsEnded.Load())))
	switch p.evictionRisk.Load() {
	case evictionYes:
		emit(metrics.Gauge(descEviction, 1))
	case evictionNo:
		emit(metrics.Gauge(descEviction, 0))
	}
}

// boolGauge is a gauge's value for b: 1 or 0.
func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
