package lsnstore

// SnapshotCarrier is implemented by readers (RedisReader) whose reads can
// carry the shared poller's snapshot: with CarrySnapshot on, every read's
// MGET also reads the snapshot's key, in the same round trip, so that a
// follower routes each read on the newest snapshot instead of polling
// the store for it (docs/design/topology.md, "What a follower asks of the
// store").
type SnapshotCarrier interface {
	// CarrySnapshot turns the carrying on or off (off by default).
	CarrySnapshot(on bool)
	// CarriedSnapshot returns the snapshot the last read carried ("" when
	// the key was missing: no holder) and a number that changes whenever
	// a read carried another value (0: none yet).
	CarriedSnapshot() (snap string, seq uint64)
}

var _ SnapshotCarrier = (*RedisReader)(nil)

// carriedSnapshot is a snapshot a read carried, and its sequence number.
type carriedSnapshot struct {
	snap string
	seq  uint64
}

// CarrySnapshot implements SnapshotCarrier.
func (rr *RedisReader) CarrySnapshot(on bool) { rr.carry.Store(on) }

// CarriedSnapshot implements SnapshotCarrier.
func (rr *RedisReader) CarriedSnapshot() (string, uint64) {
	c := rr.carried.Load()
	if c == nil {
		return "", 0
	}
	return c.snap, c.seq
}

// keepCarried keeps the snapshot's value v (a string; nil: missing) that
// a read's MGET returned, when it differs from the last one.
func (rr *RedisReader) keepCarried(v any) {
	s, _ := v.(string)
	for {
		old := rr.carried.Load()
		var seq uint64 = 1
		if old != nil {
			if old.snap == s {
				return
			}
			seq = old.seq + 1
		}
		if rr.carried.CompareAndSwap(old, &carriedSnapshot{snap: s, seq: seq}) {
			return
		}
	}
}
