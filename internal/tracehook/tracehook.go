package tracehook

import (
	"context"
	"time"
)

// Route is a routing decision, as recorded.
type Route struct {
	Server          string // "primary" or "replica:<name>"
	Reason          string
	Tables          []string // nil when unknown
	Keys            []string // nil when none
	Waited          time.Duration
	StoreRoundTrips int
}

// Tracer records on the trace of a context.
type Tracer struct {
	// Traced reports whether ctx carries a recording span.
	Traced func(ctx context.Context) bool
	// Route records a routing decision on the recording span of ctx.
	Route func(ctx context.Context, r Route)
	// Write records a write to the primary marking tables (nil: unknown).
	Write func(ctx context.Context, tables []string)
}

// T is the tracer; nil until freshreadotel is linked.
var T *Tracer
