// Package twins holds two minimal services that measure what freshread
// costs in binary size ("pay for what you use"): freshread/ opens
// GORM on PostgreSQL and uses the plugin with a Redis store and nothing
// else; dbresolver/ is the same service with gorm.io/plugin/dbresolver and
// a go-redis client. scripts/twin-sizes (make twin-sizes) builds both with
// the module's own dependency versions and prints their sizes; the figures
// are in docs/measurements/footprint.md. The services are built, never run.
package twins
