package roundtrip

import (
	"sync/atomic"
	"time"
)

// Estimator estimates a peer's round trip from the calls that answered
// before their timeout, as TCP estimates its retransmission timeout (RFC
// 6298): a smoothed round trip and its mean deviation, and a timeout of
// twice the smoothed round trip plus four deviations (TCP's is one plus
// four, with a floor of a second; twice leaves room for a round trip that
// grows faster than the average follows it on a loaded machine). It
// separates a peer that
// is slow (its answers arrive, late, because the machine or the server is
// loaded: the timeout grows with them) from one that is gone (nothing
// answers: no sample, the timeout stays what it was). Lock-free: racing
// updates may lose a sample, never corrupt the estimate.
type Estimator struct {
	srtt   atomic.Int64 // nanoseconds; 0: no sample yet
	rttvar atomic.Int64 // nanoseconds
}

// Observe adds the round trip d of a call that answered.
func (e *Estimator) Observe(d time.Duration) {
	n := max(int64(d), 1)
	s := e.srtt.Load()
	if s == 0 {
		e.srtt.Store(n)
		e.rttvar.Store(n / 2)
		return
	}
	dev := s - n
	if dev < 0 {
		dev = -dev
	}
	v := e.rttvar.Load()
	e.rttvar.Store(v - v/4 + dev/4)
	e.srtt.Store(s - s/8 + n/8)
}

// Timeout is the estimate's timeout within [floor, ceiling].
func (e *Estimator) Timeout(floor, ceiling time.Duration) time.Duration {
	t := time.Duration(2*e.srtt.Load() + 4*e.rttvar.Load())
	return min(max(t, floor), ceiling)
}
