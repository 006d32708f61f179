package lsnstore

import (
	"time"

	"github.com/freshread/freshread/internal/lib/roundtrip"
)

// roundTrips estimates the store's round trip from the calls that
// answered before their timeout (internal/lib/roundtrip): the timeout of
// a lookup grows with a slow store's answers and stays put for a gone one.
type roundTrips struct{ roundtrip.Estimator }

func (e *roundTrips) observe(d time.Duration) { e.Observe(d) }

func (e *roundTrips) timeout(floor, ceiling time.Duration) time.Duration {
	return e.Timeout(floor, ceiling)
}
