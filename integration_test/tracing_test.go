package integration_test

import (
	"context"
	"slices"
	"testing"

	"github.com/freshread/freshread/freshreadotel"
	"github.com/freshread/freshread/internal/lib/tracerec"
	"github.com/freshread/freshread/plugin"
)

// TestTracingRecordsDecision: a read in a recording span carries the
// routing decision as a freshread.route event: the primary and the
// written table while the replicas are paused after a write, a replica
// once replay resumes. With the in-memory store the read is decided while
// routing; with Redis, while its query runs (the lookup overlaps it).
func TestTracingRecordsDecision(t *testing.T) { checkTracingRecordsDecision(t, newEnv(t)) }

func TestTracingRecordsOverlappedDecision(t *testing.T) {
	store, _ := newRedisStore(t, "tracing-"+t.Name())
	checkTracingRecordsDecision(t, newEnv(t, withStore(store)))
}

func checkTracingRecordsDecision(t *testing.T, e *env) {
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.pauseAll()
	if err := setName(e.db, 1); err != nil {
		t.Fatal(err)
	}

	tp := tracerec.NewProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracedRead := func(what string) (served, map[string]any) {
		t.Helper()
		tp.Reset()
		ctx, span := tp.Tracer("test").Start(e.ctx(), what)
		got := e.readItem(e.db.WithContext(ctx), 1)
		span.End()
		spans := tp.Spans()
		if len(spans) != 1 {
			t.Fatalf("%s: %d spans exported, want 1", what, len(spans))
		}
		var events []tracerec.Event
		for _, ev := range spans[0].Events {
			if ev.Name == freshreadotel.RouteEvent {
				events = append(events, ev)
			}
		}
		if len(events) != 1 {
			t.Fatalf("%s: %d %s events, want 1", what, len(events), freshreadotel.RouteEvent)
		}
		attrs := map[string]any{}
		for _, kv := range events[0].Attributes {
			attrs[string(kv.Key)] = kv.Value.AsInterface()
		}
		return got, attrs
	}

	got, attrs := tracedRead("paused")
	if got.Name != "new" {
		t.Fatalf("STALE READ: %+v", got)
	}
	e.mustPrimary(got, "paused replicas")
	if attrs[string(freshreadotel.AttrServer)] != "primary" || attrs[string(freshreadotel.AttrReason)] != string(plugin.ReasonLagging) {
		t.Fatalf("paused replicas: event %v, want server primary, reason %s", attrs, plugin.ReasonLagging)
	}
	if tables, _ := attrs[string(freshreadotel.AttrTables)].([]string); !slices.Equal(tables, []string{"items"}) {
		t.Fatalf("paused replicas: %s = %v, want [items]", freshreadotel.AttrTables, attrs[string(freshreadotel.AttrTables)])
	}

	e.resumeAll()
	got, attrs = tracedRead("resumed")
	e.mustReplica(got, "resumed replicas")
	server, _ := attrs[string(freshreadotel.AttrServer)].(string)
	if len(server) <= len("replica:") || server[:len("replica:")] != "replica:" || attrs[string(freshreadotel.AttrReason)] != string(plugin.ReasonFresh) {
		t.Fatalf("resumed replicas: event %v, want a replica, reason %s", attrs, plugin.ReasonFresh)
	}
}
