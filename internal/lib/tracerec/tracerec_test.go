package tracerec

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

func TestRecordsSpans(t *testing.T) {
	tp := NewProvider()
	var _ trace.TracerProvider = tp
	ctx, parent := tp.Tracer("test").Start(context.Background(), "parent", trace.WithAttributes(attribute.String("a", "1")))
	_, child := tp.Tracer("test").Start(ctx, "child")
	if !child.IsRecording() || trace.SpanFromContext(ctx) != parent {
		t.Fatal("the child does not record, or ctx does not carry the parent")
	}
	child.AddEvent("e1", trace.WithAttributes(attribute.StringSlice("tables", []string{"orders"}), attribute.Int64("n", 1)))
	child.SetAttributes(attribute.String("b", "x"), attribute.String("b", "y"))
	child.SetStatus(codes.Error, "broken")
	child.SetStatus(codes.Unset, "") // lower: ignored
	child.RecordError(errors.New("boom"))
	child.End()
	if child.IsRecording() {
		t.Fatal("an ended span still records")
	}
	child.AddEvent("after end")
	parent.SetStatus(codes.Ok, "ignored description")
	parent.End()
	parent.End() // once

	spans := tp.Spans()
	if len(spans) != 2 || spans[0].Name != "child" || spans[1].Name != "parent" {
		t.Fatalf("spans %+v, want child then parent", spans)
	}
	c, p := spans[0], spans[1]
	if !c.Parent.Equal(p.SpanContext) || c.SpanContext.TraceID() != p.SpanContext.TraceID() || p.Parent.IsValid() || c.SpanContext.SpanID() == p.SpanContext.SpanID() {
		t.Fatalf("parent/child: child %v (parent %v), parent %v", c.SpanContext, c.Parent, p.SpanContext)
	}
	if len(c.Events) != 2 || c.Events[0].Name != "e1" || c.Events[1].Name != "exception" {
		t.Fatalf("events %+v", c.Events)
	}
	if v := c.Events[0].Attributes[0].Value.AsStringSlice(); len(v) != 1 || v[0] != "orders" {
		t.Fatalf("event attribute %v", v)
	}
	if len(c.Attributes) != 1 || c.Attributes[0].Value.AsString() != "y" {
		t.Fatalf("attributes %v, want b=y", c.Attributes)
	}
	if c.Status != (Status{codes.Error, "broken"}) || p.Status != (Status{Code: codes.Ok}) {
		t.Fatalf("statuses %v %v", c.Status, p.Status)
	}
	if len(p.Attributes) != 1 || p.Attributes[0] != attribute.String("a", "1") {
		t.Fatalf("start attributes %v", p.Attributes)
	}
	tp.Reset()
	if len(tp.Spans()) != 0 {
		t.Fatal("Reset kept spans")
	}
}

func TestNotSampled(t *testing.T) {
	tp := NewProvider(Sampled(false))
	ctx, s := tp.Tracer("test").Start(context.Background(), "read")
	s.AddEvent("e")
	s.End()
	if s.IsRecording() || trace.SpanFromContext(ctx).IsRecording() || !s.SpanContext().IsValid() || s.SpanContext().IsSampled() {
		t.Fatal("an unsampled span records, or has no valid context")
	}
	if len(tp.Spans()) != 0 {
		t.Fatalf("spans %+v, want none", tp.Spans())
	}
}

func TestEventLimit(t *testing.T) {
	tp := NewProvider()
	_, s := tp.Tracer("test").Start(context.Background(), "many")
	for i := range MaxEvents + 3 {
		s.AddEvent("e", trace.WithAttributes(attribute.Int("i", i)))
	}
	s.End()
	sp := tp.Spans()[0]
	if len(sp.Events) != MaxEvents || sp.DroppedEvents != 3 || sp.Events[0].Attributes[0].Value.AsInt64() != 3 {
		t.Fatalf("%d events kept, %d dropped, first %v", len(sp.Events), sp.DroppedEvents, sp.Events[0].Attributes)
	}
}
