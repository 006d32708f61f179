package plugin

import "errors"

var errBreakerOpen = errors.New("plugin: store circuit breaker open")

type rawKind int

const (
	kindRead rawKind = iota
	kindBuffer
	kindWrite
)

// rawClass is what routing needs to know of a raw SQL text.
type rawClass struct {
	kind       rawKind
	reads      []string
	readsKnown bool
	writes     []string // nil: unknown tables
	locks      bool
}

// classify is the conservative placeholder analysis until the classifier
// is wired in: raw SQL never goes to a replica, and a raw write raises the
// database-wide position.
func (p *Plugin) classify(sql string) rawClass {
	return rawClass{kind: kindWrite}
}
