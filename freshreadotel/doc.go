// Package freshreadotel records the plugin's routing decisions and writes
// as events on the OpenTelemetry span of each statement's context. The
// plugin does not link OpenTelemetry; a service that wants the events sets
// this package's tracer in the plugin's Config:
//
//	plugin.New(plugin.Config{..., Tracer: freshreadotel.Tracer()})
//
// Imported for its side effect alone (the older way), it traces every
// plugin whose Config.Tracer is unset.
//
// A read in a recording span then gets a RouteEvent (freshread.route)
// with the decision's attributes, a write a WriteEvent (freshread.write).
// See docs/guide/tracing.md.
package freshreadotel
