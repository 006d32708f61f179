package roundtrip

import (
	"sync/atomic"
	"time"
)

// monoStart anchors answer times on the monotonic clock.
var monoStart = time.Now()

// Answers records when a peer last answered, so that a caller waiting on
// one late call can tell whether the peer still answers others. The zero
// value has seen no answer. Lock-free.
type Answers struct {
	last atomic.Int64 // since monoStart, nanoseconds
}

// Answered records an answer now. Records closer than a millisecond to the
// last one are skipped (a hot path calls it on every answer): Since may
// then miss an answer of the last millisecond, which only makes a caller
// more cautious.
func (a *Answers) Answered() {
	now := int64(time.Since(monoStart))
	if now-a.last.Load() > int64(time.Millisecond) {
		a.last.Store(now)
	}
}

// Since reports whether an answer was recorded after t.
func (a *Answers) Since(t time.Time) bool { return a.last.Load() > int64(t.Sub(monoStart)) }
