package tracker

import (
	"errors"
	"fmt"

	"github.com/freshread/freshread/internal/promcollect"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the tracker's Prometheus metrics. Labels never hold a
// credential: "database" is host:port/name.
type metrics struct {
	replayLagBytes   *prometheus.GaugeVec
	replayLagSeconds *prometheus.GaugeVec
	tablesTracked    *prometheus.GaugeVec
	dependencyEdges  *prometheus.GaugeVec
	everything       *prometheus.GaugeVec
	decodingLagBytes *prometheus.GaugeVec
	decodedTx        *prometheus.CounterVec
	statsRaises      *prometheus.CounterVec
	databaseUp       *prometheus.GaugeVec
	errors           *prometheus.CounterVec
	registrySize     prometheus.Gauge
	redisUp          prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	ns := "freshread_tracker"
	m := &metrics{
		replayLagBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "replay_lag_bytes",
			Help: "Bytes of WAL the replica has not replayed (primary's current position minus its replay position)."}, []string{"database", "replica"}),
		replayLagSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "replay_lag_seconds",
			Help: "pg_stat_replication.replay_lag of the replica, in seconds."}, []string{"database", "replica"}),
		tablesTracked: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "tables_tracked",
			Help: "User tables of the database."}, []string{"database"}),
		dependencyEdges: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "dependency_edges",
			Help: "Direct edges of the dependency graph (triggers, cascades, rules, views)."}, []string{"database"}),
		everything: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "dependency_everything_tables",
			Help: "Tables whose writes may write anything (dynamic SQL, unknown functions, rules not understood)."}, []string{"database"}),
		decodingLagBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "decoding_lag_bytes",
			Help: "Bytes of WAL between the primary's current position and the slot's confirmed position (ModeLogical)."}, []string{"database"}),
		decodedTx: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "decoded_transactions_total",
			Help: "Committed transactions decoded and published (ModeLogical)."}, []string{"database"}),
		statsRaises: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "stats_raises_total",
			Help: "Tables raised because their pg_stat_user_tables counters moved (ModeStats)."}, []string{"database"}),
		databaseUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "database_up",
			Help: "1 when the last query on the primary succeeded."}, []string{"database"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "errors_total",
			Help: "Errors by loop (replay, dependencies, stats, decoding, registry)."}, []string{"database", "loop"}),
		registrySize: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "registry_size",
			Help: "Databases tracked (registry and static)."}),
		redisUp: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "redis_up",
			Help: "1 when the last Redis call succeeded."}),
	}
	reg.MustRegister(m.replayLagBytes, m.replayLagSeconds, m.tablesTracked, m.dependencyEdges, m.everything,
		m.decodingLagBytes, m.decodedTx, m.statsRaises, m.databaseUp, m.errors, m.registrySize, m.redisUp)
	registerDenied(reg)
	return m
}

// registerDenied registers freshreadprom.Denied() (the Redis commands
// refused to the tracker's user, freshread_store_denied_total) on reg,
// unless it is there already: a process that embeds the tracker may have
// registered it beside a plugin's collector on the same registry.
func registerDenied(reg prometheus.Registerer) {
	if err := reg.Register(promcollect.New(promcollect.Denied{})); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(fmt.Errorf("tracker: registering the store refusals collector: %w", err))
		}
	}
}

// forget drops the series of a database that left the registry.
func (m *metrics) forget(db string) {
	for _, v := range []*prometheus.GaugeVec{m.replayLagBytes, m.replayLagSeconds, m.tablesTracked,
		m.dependencyEdges, m.everything, m.decodingLagBytes, m.databaseUp} {
		v.DeletePartialMatch(prometheus.Labels{"database": db})
	}
	m.decodedTx.DeletePartialMatch(prometheus.Labels{"database": db})
	m.statsRaises.DeletePartialMatch(prometheus.Labels{"database": db})
	m.errors.DeletePartialMatch(prometheus.Labels{"database": db})
}
