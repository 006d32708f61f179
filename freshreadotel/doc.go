// Package freshreadotel records the plugin's routing decisions and writes
// as events on the OpenTelemetry span of each statement's context. The
// plugin does not link OpenTelemetry; a service that wants the events
// imports this package for its side effect:
//
//	import _ "github.com/freshread/freshread/freshreadotel"
//
// A read in a recording span then gets a RouteEvent (freshread.route)
// with the decision's attributes, a write a WriteEvent (freshread.write).
// See docs/guide/tracing.md.
package freshreadotel
