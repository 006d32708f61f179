package plugin

import (
	"errors"
)

// errBreakerOpen is the store error while the breaker is open.
var errBreakerOpen = errors.New("plugin: store circuit breaker open")

// errClosed answers the lookups still queued when the plugin closes.
var errClosed = errors.New("plugin: closed")

// breakerOpen reports whether the store's breaker (internal/lib/breaker) is
// open or probing: reads then take the sequential path, which does not ask
// the store while it is open.
func (p *Plugin) breakerOpen() bool { return p.breaker.Open() }
