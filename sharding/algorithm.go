package sharding

import "fmt"

// MaxBuckets is the largest number of buckets an Algorithm may have: the ID
// layout keeps 10 bits for the bucket.
const MaxBuckets = 1024

// Algorithm maps a shard key (a user ID) to a bucket and a bucket to a
// shard. Build one with Mod or VirtualBuckets.
type Algorithm struct {
	buckets int
	ranges  []BucketRange // nil for Mod: bucket i is shard i
}

// BucketRange assigns the buckets First..Last (inclusive) to a shard.
type BucketRange struct {
	// First and Last are the range's first and last buckets.
	First, Last int
	// Shard is the name of the shard the range is on.
	Shard string
}

// Mod is the original design's `user_id mod N`: bucket = key mod n and
// bucket i lives on Config.Shards[i]. n must equal the number of shards and
// be at most MaxBuckets. Doubling the shards moves half of every shard.
func Mod(n int) Algorithm { return Algorithm{buckets: n} }

// VirtualBuckets maps a key to one of count buckets (key mod count) and
// buckets to shards by ranges, which must cover 0..count-1 exactly once.
// Resharding moves ranges bucket by bucket; order IDs minted by
// IDGenerator embed the bucket, so they keep routing after a move.
func VirtualBuckets(count int, ranges ...BucketRange) Algorithm {
	return Algorithm{buckets: count, ranges: ranges}
}

// EvenBuckets is VirtualBuckets with count buckets split into equal
// consecutive ranges over shards, in order.
func EvenBuckets(count int, shards ...string) Algorithm {
	var rs []BucketRange
	for i, s := range shards {
		rs = append(rs, BucketRange{First: i * count / len(shards), Last: (i+1)*count/len(shards) - 1, Shard: s})
	}
	return VirtualBuckets(count, rs...)
}

// Buckets is the number of buckets.
func (a Algorithm) Buckets() int { return a.buckets }

// Bucket returns key's bucket. Keys must be non-negative.
func (a Algorithm) Bucket(key int64) int { return int(uint64(key) % uint64(a.buckets)) }

// bind resolves the bucket -> shard index table against the configured
// shard names.
func (a Algorithm) bind(names []string) ([]uint8, error) {
	if a.buckets <= 0 || a.buckets > MaxBuckets {
		return nil, fmt.Errorf("%w: %d buckets (want 1..%d)", ErrConfig, a.buckets, MaxBuckets)
	}
	table := make([]uint8, a.buckets)
	if a.ranges == nil {
		if a.buckets != len(names) {
			return nil, fmt.Errorf("%w: Mod(%d) with %d shards", ErrConfig, a.buckets, len(names))
		}
		for i := range table {
			table[i] = uint8(i)
		}
		return table, nil
	}
	index := make(map[string]int, len(names))
	for i, n := range names {
		index[n] = i
	}
	seen := make([]bool, a.buckets)
	for _, r := range a.ranges {
		si, ok := index[r.Shard]
		if !ok {
			return nil, fmt.Errorf("%w: bucket range %d-%d names shard %q", ErrUnknownShard, r.First, r.Last, r.Shard)
		}
		if r.First < 0 || r.Last >= a.buckets || r.First > r.Last {
			return nil, fmt.Errorf("%w: bucket range %d-%d outside 0-%d", ErrConfig, r.First, r.Last, a.buckets-1)
		}
		for b := r.First; b <= r.Last; b++ {
			if seen[b] {
				return nil, fmt.Errorf("%w: bucket %d is in two ranges", ErrConfig, b)
			}
			seen[b] = true
			table[b] = uint8(si)
		}
	}
	for b, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("%w: bucket %d is in no range", ErrConfig, b)
		}
	}
	return table, nil
}
