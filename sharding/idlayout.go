package sharding

import "time"

// ID layout (64 bits, always positive, fits PostgreSQL bigint):
//
//	bit  63      0 (sign)
//	bit  62      1: format marker (IDs minted here; anything below 2^62,
//	             such as a serial sequence's values, is an "old" ID)
//	bits 61..21  41 bits: milliseconds since IDEpoch (2025-01-01 UTC),
//	             until 2094-09
//	bits 20..10  11 bits: route code. Bit 20 clear: bits 19..10 are the
//	             user's bucket (Algorithm.Bucket). Bit 20 set: bits 19..10
//	             are the index of a hot user's dedicated shard.
//	bits  9..4   6 bits: worker ID, leased (64 generators at a time)
//	bits  3..0   4 bits: sequence (16 IDs per ms per route code per worker)
//
// IDs of different route codes never collide, so each route code has its
// own sequence: one generator mints up to 16,000 IDs/s per bucket and
// 16.4 million/s over all buckets. A burst past 16 in one millisecond
// borrows the next millisecond (up to MaxAhead), so IDs stay unique and
// roughly time-ordered.
const (
	idMarker    = int64(1) << 62
	idTimeBits  = 41
	idRouteBits = 11
	idWorkBits  = 6
	idSeqBits   = 4

	idSeqShift   = 0
	idWorkShift  = idSeqBits
	idRouteShift = idWorkShift + idWorkBits
	idTimeShift  = idRouteShift + idRouteBits

	// MaxWorkers is the number of worker IDs (concurrent generators).
	MaxWorkers = 1 << idWorkBits
	// IDsPerMillisecond is the sequence space per route code per worker.
	IDsPerMillisecond = 1 << idSeqBits

	routeHot  = 1 << 10
	routeMask = 1<<idRouteBits - 1
	maxTimeMs = 1<<idTimeBits - 1
)

// IDEpoch is time zero of the ID layout.
var IDEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// DecodedID is the content of an ID minted by IDGenerator.
type DecodedID struct {
	// Time is when the ID was minted, to the millisecond.
	Time time.Time
	Hot  bool // Shard holds a hot shard's index; otherwise Bucket is set
	// Bucket is the key's bucket (when not Hot).
	Bucket int
	// Shard is the hot shard's index (when Hot).
	Shard int
	// Worker is the worker ID of the generator that minted it.
	Worker int
	// Seq is its sequence number within the millisecond.
	Seq int
}

// IsMinted reports whether id carries the format marker of IDGenerator.
func IsMinted(id int64) bool { return id > 0 && id&idMarker != 0 }

// DecodeID decodes an ID minted by IDGenerator; ok is false for old IDs.
func DecodeID(id int64) (DecodedID, bool) {
	if !IsMinted(id) {
		return DecodedID{}, false
	}
	ms := (id >> idTimeShift) & maxTimeMs
	route := int((id >> idRouteShift) & routeMask)
	d := DecodedID{
		Time:   IDEpoch.Add(time.Duration(ms) * time.Millisecond),
		Worker: int((id >> idWorkShift) & (MaxWorkers - 1)),
		Seq:    int(id & (IDsPerMillisecond - 1)),
	}
	if route&routeHot != 0 {
		d.Hot, d.Shard = true, route&(routeHot-1)
	} else {
		d.Bucket = route
	}
	return d, true
}

func composeID(ms int64, route, worker, seq int) int64 {
	return idMarker | ms<<idTimeShift | int64(route)<<idRouteShift | int64(worker)<<idWorkShift | int64(seq)
}
