package tracerec

import (
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// MaxEvents is how many events a span keeps, the latest, as the SDK's
// default span limits do (128).
const MaxEvents = 128

// Event is one event of a span.
type Event struct {
	Name       string
	Attributes []attribute.KeyValue
	Time       time.Time
}

// Status is a span's status.
type Status struct {
	Code        codes.Code
	Description string
}

// Span is an ended span as recorded.
type Span struct {
	Name          string
	SpanContext   trace.SpanContext
	Parent        trace.SpanContext // invalid for a root span
	Kind          trace.SpanKind
	Attributes    []attribute.KeyValue
	Events        []Event
	DroppedEvents int // events beyond MaxEvents, the oldest, not kept
	Status        Status
	Start, End    time.Time
}

// Option configures a provider.
type Option func(*Provider)

// Sampled makes the provider's spans record (true, the default) or not.
func Sampled(record bool) Option { return func(p *Provider) { p.record = record } }

// Provider is a trace.TracerProvider that records its ended spans.
type Provider struct {
	embedded.TracerProvider
	record bool
	ids    atomic.Uint64

	mu    sync.Mutex
	spans []Span
}

// NewProvider returns a provider whose spans record (see Sampled).
func NewProvider(opts ...Option) *Provider {
	p := &Provider{record: true}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Tracer implements trace.TracerProvider.
func (p *Provider) Tracer(string, ...trace.TracerOption) trace.Tracer {
	return &tracer{p: p}
}

// Spans returns the spans ended so far, in the order they ended.
func (p *Provider) Spans() []Span {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.spans)
}

// Reset forgets the spans ended so far.
func (p *Provider) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.spans = nil
}

// Shutdown does nothing (the SDK provider's has its exporters to flush).
func (p *Provider) Shutdown(context.Context) error { return nil }

func (p *Provider) newID() uint64 { return p.ids.Add(1) }

type tracer struct {
	embedded.Tracer
	p *Provider
}

// Start implements trace.Tracer: a child of the span in ctx if any (its
// trace), else a root span of a new trace.
func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	if cfg.NewRoot() {
		parent = trace.SpanContext{}
	}
	var tid trace.TraceID
	if parent.IsValid() {
		tid = parent.TraceID()
	} else {
		binary.BigEndian.PutUint64(tid[8:], t.p.newID())
	}
	var sid trace.SpanID
	binary.BigEndian.PutUint64(sid[:], t.p.newID())
	scc := trace.SpanContextConfig{TraceID: tid, SpanID: sid}
	if t.p.record {
		scc.TraceFlags = trace.FlagsSampled
	}
	sc := trace.NewSpanContext(scc)
	if !t.p.record {
		return trace.ContextWithSpanContext(ctx, sc), trace.SpanFromContext(trace.ContextWithSpanContext(ctx, sc))
	}
	start := cfg.Timestamp()
	if start.IsZero() {
		start = time.Now()
	}
	s := &span{p: t.p, tp: t.p, rec: Span{Name: name, SpanContext: sc, Parent: parent, Kind: cfg.SpanKind(),
		Attributes: slices.Clone(cfg.Attributes()), Start: start}}
	return trace.ContextWithSpan(ctx, s), s
}

// span is a recording span until End.
type span struct {
	embedded.Span
	p  *Provider
	tp trace.TracerProvider

	mu    sync.Mutex
	ended bool
	rec   Span
}

func (s *span) SpanContext() trace.SpanContext { return s.rec.SpanContext }

func (s *span) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

func (s *span) End(opts ...trace.SpanEndOption) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	cfg := trace.NewSpanEndConfig(opts...)
	s.rec.End = cfg.Timestamp()
	if s.rec.End.IsZero() {
		s.rec.End = time.Now()
	}
	rec := s.rec
	s.mu.Unlock()
	s.p.mu.Lock()
	s.p.spans = append(s.p.spans, rec)
	s.p.mu.Unlock()
}

func (s *span) addEvent(e Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	if len(s.rec.Events) >= MaxEvents {
		s.rec.Events = append(s.rec.Events[:0], s.rec.Events[1:]...)
		s.rec.DroppedEvents++
	}
	s.rec.Events = append(s.rec.Events, e)
}

func (s *span) AddEvent(name string, opts ...trace.EventOption) {
	cfg := trace.NewEventConfig(opts...)
	s.addEvent(Event{Name: name, Attributes: slices.Clone(cfg.Attributes()), Time: cfg.Timestamp()})
}

// AddLink is accepted and not recorded.
func (s *span) AddLink(trace.Link) {}

func (s *span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	cfg := trace.NewEventConfig(opts...)
	attrs := append([]attribute.KeyValue{attribute.String("exception.message", err.Error())}, cfg.Attributes()...)
	s.addEvent(Event{Name: "exception", Attributes: attrs, Time: cfg.Timestamp()})
}

// SetStatus sets the status as the SDK does: Ok is final, an Error's
// description is kept, an Unset's or Ok's is not.
func (s *span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || code < s.rec.Status.Code {
		return
	}
	if code != codes.Error {
		description = ""
	}
	s.rec.Status = Status{Code: code, Description: description}
}

func (s *span) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.rec.Name = name
	}
}

// SetAttributes sets kv, a key set again keeping its place and taking the
// new value.
func (s *span) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	for _, a := range kv {
		i := slices.IndexFunc(s.rec.Attributes, func(b attribute.KeyValue) bool { return b.Key == a.Key })
		if i >= 0 {
			s.rec.Attributes[i] = a
		} else {
			s.rec.Attributes = append(s.rec.Attributes, a)
		}
	}
}

func (s *span) TracerProvider() trace.TracerProvider { return s.tp }
