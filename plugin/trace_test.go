package plugin

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"gorm.io/gorm"

	"github.com/freshread/freshread/freshreadotel"
	"github.com/freshread/freshread/internal/lib/tracerec"
	"github.com/freshread/freshread/internal/tracehook"
	"github.com/freshread/freshread/lsnstore"
)

// traceHarness is a plugin with one replica "r1" that has replayed
// position 100, over an in-memory store, without servers: reads are routed
// by toFresh on a dry-run statement.
func traceHarness(t *testing.T) (*Plugin, *lsnstore.Memory, *gorm.DB) {
	t.Helper()
	store := lsnstore.NewMemory()
	p := &Plugin{cfg: Config{Store: store, MaxLag: time.Minute}.withDefaults(), randomPolicy: true}
	r := &replica{name: "r1"}
	r.pool = &replicaPool{r: r, p: p}
	r.state.Store(&replicaState{pos: lsnstore.PositionOf(100), up: true, withinLag: true, polledAt: time.Now()})
	p.replicaSet.Store(&[]*replica{r})
	return p, store, dryDB(t)
}

// routeEvents routes a read of tables inside a span of an in-memory
// recording tracer (sampled: the span records, or not) and
// returns the span's freshread.route events.
func routeEvents(t *testing.T, p *Plugin, db *gorm.DB, sampled bool, tables ...string) []tracerec.Event {
	t.Helper()
	tp := tracerec.NewProvider(tracerec.Sampled(sampled))
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("test").Start(context.Background(), "read")
	tx := db.WithContext(ctx)
	p.toFresh(tx, tables, tables, true, false)
	span.End()
	var events []tracerec.Event
	for _, s := range tp.Spans() {
		for _, e := range s.Events {
			if e.Name == freshreadotel.RouteEvent {
				events = append(events, e)
			}
		}
	}
	return events
}

func attrOf(e tracerec.Event, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range e.Attributes {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func checkEvent(t *testing.T, e tracerec.Event, server, reason string, tables []string) {
	t.Helper()
	if v, _ := attrOf(e, freshreadotel.AttrServer); v.AsString() != server {
		t.Errorf("%s = %q, want %q", freshreadotel.AttrServer, v.AsString(), server)
	}
	if v, _ := attrOf(e, freshreadotel.AttrReason); v.AsString() != reason {
		t.Errorf("%s = %q, want %q", freshreadotel.AttrReason, v.AsString(), reason)
	}
	if v, _ := attrOf(e, freshreadotel.AttrTables); !slices.Equal(v.AsStringSlice(), tables) {
		t.Errorf("%s = %q, want %q", freshreadotel.AttrTables, v.AsStringSlice(), tables)
	}
	if v, _ := attrOf(e, freshreadotel.AttrStoreRoundTrips); v.AsInt64() != 1 {
		t.Errorf("%s = %d, want 1", freshreadotel.AttrStoreRoundTrips, v.AsInt64())
	}
	if _, ok := attrOf(e, freshreadotel.AttrWaitMS); ok {
		t.Errorf("%s recorded for a read that did not wait", freshreadotel.AttrWaitMS)
	}
}

func TestTraceFreshReplicaRead(t *testing.T) {
	p, _, db := traceHarness(t)
	events := routeEvents(t, p, db, true, "orders")
	if len(events) != 1 {
		t.Fatalf("%d %s events, want 1", len(events), freshreadotel.RouteEvent)
	}
	checkEvent(t, events[0], "replica:r1", string(ReasonFresh), []string{"orders"})
}

func TestTraceReadOnPrimaryBehindTable(t *testing.T) {
	p, store, db := traceHarness(t)
	if err := store.Raise(context.Background(), []string{"orders"}, lsnstore.PositionOf(200)); err != nil {
		t.Fatal(err)
	}
	events := routeEvents(t, p, db, true, "orders")
	if len(events) != 1 {
		t.Fatalf("%d %s events, want 1", len(events), freshreadotel.RouteEvent)
	}
	checkEvent(t, events[0], "primary", string(ReasonLagging), []string{"orders"})
}

func TestTraceNothingWithoutRecordingSpan(t *testing.T) {
	p, _, db := traceHarness(t)
	if events := routeEvents(t, p, db, false, "orders"); len(events) != 0 {
		t.Fatalf("%d %s events on a span that does not record, want 0", len(events), freshreadotel.RouteEvent)
	}
	// No span at all: no allocation for tracing on the routing path.
	ctx := context.Background()
	if p.traced(ctx) {
		t.Fatal("traced without a span")
	}
	allocs := testing.AllocsPerRun(100, func() { p.traceDecision(ctx, Decision{Target: ReplicaTarget, Replica: "r1"}) })
	if allocs != 0 {
		t.Fatalf("traceDecision without a span: %v allocations, want 0", allocs)
	}
}

// TestTraceConfigTracer: Config.Tracer records the decisions without the
// blank import's registration; without either, nothing is recorded.
func TestTraceConfigTracer(t *testing.T) {
	registered := tracehook.T
	tracehook.T = nil // as if freshreadotel were not imported for its side effect
	defer func() { tracehook.T = registered }()
	p, _, db := traceHarness(t)
	if events := routeEvents(t, p, db, true, "orders"); len(events) != 0 {
		t.Fatalf("%d %s events with no tracer set or registered, want 0", len(events), freshreadotel.RouteEvent)
	}
	p.cfg.Tracer = freshreadotel.Tracer()
	events := routeEvents(t, p, db, true, "orders")
	if len(events) != 1 {
		t.Fatalf("%d %s events with Config.Tracer set, want 1", len(events), freshreadotel.RouteEvent)
	}
	checkEvent(t, events[0], "replica:r1", "fresh", []string{"orders"})
}

func TestTraceWrite(t *testing.T) {
	p, _, db := traceHarness(t)
	tp := tracerec.NewProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("test").Start(context.Background(), "write")
	p.recordWrite(db.WithContext(ctx), []string{"orders"})
	span.End()
	spans := tp.Spans()
	if len(spans) != 1 || len(spans[0].Events) != 1 || spans[0].Events[0].Name != freshreadotel.WriteEvent {
		t.Fatalf("spans %+v, want one with one %s event", spans, freshreadotel.WriteEvent)
	}
	e := spans[0].Events[0]
	if v, _ := attrOf(e, freshreadotel.AttrServer); v.AsString() != "primary" {
		t.Errorf("%s = %q, want primary", freshreadotel.AttrServer, v.AsString())
	}
	if v, _ := attrOf(e, freshreadotel.AttrTables); !slices.Equal(v.AsStringSlice(), []string{"orders"}) {
		t.Errorf("%s = %q, want [orders]", freshreadotel.AttrTables, v.AsStringSlice())
	}
}

// An overlapped read is decided while its query runs, under whatever span
// a tracing plugin (gorm.io/plugin/opentelemetry) started for the
// statement after routing; its decision is still recorded on the read's
// own span, as every other decision is.
func TestTraceOverlappedReadOnCallerSpan(t *testing.T) {
	for _, lagging := range []bool{false, true} {
		p, store, db := traceHarness(t)
		if lagging {
			if err := store.Raise(context.Background(), []string{"orders"}, lsnstore.PositionOf(200)); err != nil {
				t.Fatal(err)
			}
		}
		tp := tracerec.NewProvider()
		ctx, read := tp.Tracer("test").Start(context.Background(), "read")
		tx := db.WithContext(ctx)
		tables := []string{"orders"}
		if !p.overlap(tx, tables, tables, lsnstore.Position{}, lsnstore.Position{}, nil) {
			t.Fatal("the read did not overlap")
		}
		o := tx.Statement.ConnPool.(*overlapPool)
		_, stmt := tp.Tracer("otel-plugin").Start(ctx, "gorm.Query") // as otel:before_query does
		o.decide()
		stmt.End()
		read.End()
		byName := map[string]int{}
		for _, s := range tp.Spans() {
			for _, e := range s.Events {
				if e.Name == freshreadotel.RouteEvent {
					byName[s.Name]++
				}
			}
		}
		if byName["read"] != 1 || byName["gorm.Query"] != 0 {
			t.Fatalf("lagging %v: %s events by span %v, want one on the read's span", lagging, freshreadotel.RouteEvent, byName)
		}
		tp.Shutdown(context.Background())
	}
}
