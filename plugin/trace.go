package plugin

import (
	"context"

	"github.com/freshread/freshread/internal/tracehook"
)

// The span events are recorded by github.com/freshread/freshread/freshreadotel,
// when linked (internal/tracehook); the plugin does not link OpenTelemetry.

// traced reports whether ctx carries a recording span, the only case in
// which a decision is recorded on it (no allocation otherwise).
func traced(ctx context.Context) bool {
	t := tracehook.T
	return t != nil && t.Traced(ctx)
}

// traceDecision records d on the recording span of ctx, if any.
func traceDecision(ctx context.Context, d Decision) {
	t := tracehook.T
	if t == nil || !t.Traced(ctx) {
		return
	}
	server := "primary"
	if d.Target == ReplicaTarget {
		server = "replica:" + d.Replica
	}
	t.Route(ctx, tracehook.Route{Server: server, Reason: string(d.Reason), Tables: d.Tables, Keys: d.Keys,
		Waited: d.Waited, StoreRoundTrips: d.StoreRoundTrips})
}

// traceWrite records a write marking tables on the recording span of ctx,
// if any.
func traceWrite(ctx context.Context, tables []string) {
	t := tracehook.T
	if t == nil || !t.Traced(ctx) {
		return
	}
	if tables != nil {
		tables = displayNames(tables)
	}
	t.Write(ctx, tables)
}
