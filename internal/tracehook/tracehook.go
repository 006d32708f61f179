package tracehook

import (
	"context"
	"time"
)

// Tracer records on the trace of a context. plugin.Tracer has the same
// methods: a value of either is the other.
type Tracer interface {
	// Traced reports whether ctx carries a span that records.
	Traced(ctx context.Context) bool
	// RecordRoute records a routing decision on the recording span of
	// ctx: server is "primary" or "replica:<name>"; tables nil when
	// unknown; keys nil when none.
	RecordRoute(ctx context.Context, server, reason string, tables, keys []string, waited time.Duration, storeRoundTrips int)
	// RecordWrite records a write to the primary marking positions (nil:
	// unknown) on the recording span of ctx.
	RecordWrite(ctx context.Context, positions []string)
}

// T is the tracer a blank import of freshreadotel registers; nil until
// then. A plugin's Config.Tracer, when set, is used instead.
var T Tracer
