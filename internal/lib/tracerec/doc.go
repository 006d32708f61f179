// Package tracerec is an in-memory OpenTelemetry tracer provider for
// tests: it implements go.opentelemetry.io/otel/trace's TracerProvider,
// Tracer and Span, and keeps every ended span (name, parent, attributes,
// events, status) for the test to read, as the SDK's tracer with its
// tracetest in-memory exporter does, without the SDK's modules. A provider
// made with Sampled(false) starts spans that record nothing (their
// IsRecording is false) and keeps none.
package tracerec
