// Package tracehook is where freshreadotel registers the recording of the
// plugin's routing decisions and writes on the caller's trace, so that the
// plugin does not link OpenTelemetry.
package tracehook
