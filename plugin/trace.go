package plugin

import (
	"context"
	"time"

	"github.com/freshread/freshread/internal/tracehook"
)

// Tracer records the plugin's routing decisions and writes on the trace
// of each statement's context (Config.Tracer). freshreadotel.Tracer() is
// the OpenTelemetry one; the plugin itself does not link OpenTelemetry.
type Tracer interface {
	// Traced reports whether ctx carries a span that records: only then
	// is a decision recorded on it (nothing is allocated otherwise).
	Traced(ctx context.Context) bool
	// RecordRoute records a read's routing decision on the recording span
	// of ctx: server is "primary" or "replica:<name>" (Replica.Name),
	// reason the Decision's Reason; tables are the tables whose positions
	// the read waited for (nil when unknown), keys the keyed positions it
	// looked up (nil when none); waited is how long it waited for a
	// replica (MaxWait), storeRoundTrips the store's round trips.
	RecordRoute(ctx context.Context, server, reason string, tables, keys []string, waited time.Duration, storeRoundTrips int)
	// RecordWrite records a write sent to the primary on the recording
	// span of ctx, with the positions it marks (nil: unknown).
	RecordWrite(ctx context.Context, positions []string)
}

var _ tracehook.Tracer = Tracer(nil)

// tracer is Config.Tracer, else the one a blank import of freshreadotel
// registered, else nil.
func (p *Plugin) tracer() Tracer {
	if p.cfg.Tracer != nil {
		return p.cfg.Tracer
	}
	return tracehook.T
}

// traced reports whether ctx carries a recording span, the only case in
// which a decision is recorded on it (no allocation otherwise).
func (p *Plugin) traced(ctx context.Context) bool {
	t := p.tracer()
	return t != nil && t.Traced(ctx)
}

// traceDecision records d on the recording span of ctx, if any.
func (p *Plugin) traceDecision(ctx context.Context, d Decision) {
	t := p.tracer()
	if t == nil || !t.Traced(ctx) {
		return
	}
	server := "primary"
	if d.Target == ReplicaTarget {
		server = "replica:" + d.Replica
	}
	t.RecordRoute(ctx, server, string(d.Reason), d.Tables, d.Keys, d.Waited, d.StoreRoundTrips)
}

// traceWrite records a write marking tables on the recording span of ctx,
// if any.
func (p *Plugin) traceWrite(ctx context.Context, tables []string) {
	t := p.tracer()
	if t == nil || !t.Traced(ctx) {
		return
	}
	if tables != nil {
		tables = displayNames(tables)
	}
	t.RecordWrite(ctx, tables)
}
