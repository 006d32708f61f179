package freshreadotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/freshread/freshread/internal/tracehook"
)

func init() {
	tracehook.T = &tracehook.Tracer{Traced: traced, Route: route, Write: write}
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

func traced(ctx context.Context) bool {
	return trace.SpanFromContext(ctx).IsRecording()
}

// route adds r as a RouteEvent to the recording span of ctx, if any.
func route(ctx context.Context, r tracehook.Route) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, AttrServer.String(r.Server), AttrReason.String(r.Reason))
	if r.Tables != nil {
		attrs = append(attrs, AttrTables.StringSlice(r.Tables))
	}
	if r.Keys != nil {
		attrs = append(attrs, AttrKeys.StringSlice(r.Keys))
	}
	if r.Waited > 0 {
		attrs = append(attrs, AttrWaitMS.Float64(float64(r.Waited.Microseconds())/1000))
	}
	attrs = append(attrs, AttrStoreRoundTrips.Int(r.StoreRoundTrips))
	span.AddEvent(RouteEvent, trace.WithAttributes(attrs...))
}

// write adds a WriteEvent for a write marking tables to the recording span
// of ctx, if any.
func write(ctx context.Context, tables []string) {
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
