package freshreadotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/freshread/freshread/internal/tracehook"
)

// SpanTracer records the plugin's routing decisions and writes as events
// on the OpenTelemetry span of each statement's context: a plugin.Tracer.
type SpanTracer struct{}

// Tracer returns the tracer to set as plugin.Config.Tracer:
//
//	plugin.New(plugin.Config{..., Tracer: freshreadotel.Tracer()})
func Tracer() SpanTracer { return SpanTracer{} }

func init() {
	// A blank import of this package (the older way) traces every plugin
	// without a Config.Tracer.
	tracehook.T = SpanTracer{}
}

// Names of the span events recorded on the span of a statement's context.
const (
	// RouteEvent records a routing decision (plugin.Decision).
	RouteEvent = "freshread.route"
	// WriteEvent records a write sent to the primary, with AttrTables the
	// positions it marks: table names, or with positions by key the keys
	// it proved ("orders id=7") or its table's unkeyed writes ("orders
	// (unkeyed writes)"); absent when unknown (the database-wide
	// position).
	WriteEvent = "freshread.write"
)

// Attributes of the RouteEvent. Replicas are named as in plugin.Config.Replicas'
// order and in metrics and logs ("replica:<name>"); no DSN, address or
// credential is recorded.
const (
	// AttrServer is "primary" or "replica:<name>".
	AttrServer = attribute.Key("freshread.route.server")
	// AttrReason is the Decision's Reason ("fresh", "lagging", ...).
	AttrReason = attribute.Key("freshread.route.reason")
	// AttrTables are the tables whose write positions the read waited
	// for; absent when unknown (the database-wide position applied).
	AttrTables = attribute.Key("freshread.route.tables")
	// AttrKeys are the keyed positions looked up instead of the table's
	// (positions by key, the default), as "orders id=7" and "orders
	// (unkeyed writes)"; absent when none.
	AttrKeys = attribute.Key("freshread.route.keys")
	// AttrWaitMS is how long the read waited for a replica, in
	// milliseconds (plugin.Config.MaxWait); absent when it did not wait.
	AttrWaitMS = attribute.Key("freshread.route.wait_ms")
	// AttrStoreRoundTrips is the number of store round trips of the read.
	AttrStoreRoundTrips = attribute.Key("freshread.route.store_round_trips")
)

// Traced reports whether ctx carries a span that records.
func (SpanTracer) Traced(ctx context.Context) bool {
	return trace.SpanFromContext(ctx).IsRecording()
}

// RecordRoute adds a RouteEvent with the decision to the recording span
// of ctx, if any.
func (SpanTracer) RecordRoute(ctx context.Context, server, reason string, tables, keys []string, waited time.Duration, storeRoundTrips int) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, AttrServer.String(server), AttrReason.String(reason))
	if tables != nil {
		attrs = append(attrs, AttrTables.StringSlice(tables))
	}
	if keys != nil {
		attrs = append(attrs, AttrKeys.StringSlice(keys))
	}
	if waited > 0 {
		attrs = append(attrs, AttrWaitMS.Float64(float64(waited.Microseconds())/1000))
	}
	attrs = append(attrs, AttrStoreRoundTrips.Int(storeRoundTrips))
	span.AddEvent(RouteEvent, trace.WithAttributes(attrs...))
}

// RecordWrite adds a WriteEvent for a write marking tables to the
// recording span of ctx, if any.
func (SpanTracer) RecordWrite(ctx context.Context, tables []string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 2)
	attrs = append(attrs, AttrServer.String("primary"))
	if tables != nil {
		attrs = append(attrs, AttrTables.StringSlice(tables))
	}
	span.AddEvent(WriteEvent, trace.WithAttributes(attrs...))
}
