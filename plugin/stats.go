package plugin

import (
	"sync/atomic"
	"time"
)

// reasons lists every Reason in a fixed order: decision counters are an
// array indexed by it, so counting a decision is one atomic add.
var reasons = [...]Reason{
	ReasonFresh, ReasonLagging, ReasonNoReplica, ReasonStoreError, ReasonTransaction,
	ReasonLocking, ReasonHint, ReasonConsistency, ReasonWrite, ReasonUnknownSQL, ReasonReplicaFailed,
	ReasonSticky, ReasonPinned, ReasonReplicaStalled, ReasonReplicaRemoved,
}

func reasonIndex(r Reason) int {
	for i, x := range reasons {
		if x == r {
			return i
		}
	}
	return -1
}

// stats are the plugin's counters, read by the Prometheus collector.
type stats struct {
	decisions [2][len(reasons)]atomic.Uint64 // [target][reason]
	// store read latency: a fixed-bucket histogram, lock-free.
	storeCount   atomic.Uint64
	storeSumNano atomic.Uint64
	storeBuckets [len(storeBucketBounds)]atomic.Uint64
	// discontinuities counts the store's losses seen after the first
	// verification (continuity.go).
	discontinuities atomic.Uint64
	// overlapDiscarded counts replica queries started before the store
	// answered whose rows were discarded (overlap.go).
	overlapDiscarded atomic.Uint64
	// replicaSetChanges counts the changes of the replica set
	// (replica_set.go), discoveryFailures the failed DNS lookups of the
	// discovery (discovery.go).
	replicaSetChanges atomic.Uint64
	discoveryFailures atomic.Uint64
	// refused counts reads refused by Config.MaxFallbackRate, by the
	// reason they would have gone to the primary (fallback_limit.go).
	refused [len(reasons)]atomic.Uint64
	// unknownTables counts reads whose tables could not all be named
	// (route.go): they wait for the database-wide position.
	unknownTables atomic.Uint64
	// fencedWrites counts writes refused because this process's lease
	// in the store ended (lease.go); unprotectedWrites, writes
	// acknowledged that other processes may read stale (neither
	// published, nor invalidated, nor covered by the lease).
	fencedWrites, unprotectedWrites atomic.Uint64
	// lapsedConnsEnded counts the primary connections of lapsed writers
	// this process ended (writer_fence.go).
	lapsedConnsEnded atomic.Uint64
	// rests counts the poller's rests (rest.go); polls, the polls it
	// finished (its own, or a follower's of the shared poll).
	rests, polls atomic.Uint64
}

// storeBucketBounds are the upper bounds of the store latency buckets.
var storeBucketBounds = [...]time.Duration{
	50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
}

func (s *stats) decision(t Target, r Reason) {
	if i := reasonIndex(r); i >= 0 && int(t) < 2 {
		s.decisions[t][i].Add(1)
	}
}

func (s *stats) storeLatency(d time.Duration) {
	s.storeCount.Add(1)
	s.storeSumNano.Add(uint64(d))
	for i, b := range storeBucketBounds {
		if d <= b {
			s.storeBuckets[i].Add(1)
			return
		}
	}
}
