package sharding

import (
	"fmt"
	"maps"
	"slices"
)

// PlannedMove is one move of a plan: Buckets go from shard From to shard To.
type PlannedMove struct {
	// From is the name of the shard the buckets leave.
	From string `json:"from"`
	// To is the name of the shard they move to.
	To string `json:"to"`
	// Buckets are the buckets that move.
	Buckets []int `json:"buckets"`
}

// MapFromAlgorithm returns the bucket map an Algorithm and hot users
// describe over shardNames (Config.Shards' names, in order: Mod needs it),
// as version 0: what a process routes with when no map is stored, and
// what to publish as the first stored version.
func MapFromAlgorithm(a Algorithm, shardNames []string, hot map[int64]string) (BucketMap, error) {
	table, err := a.bind(shardNames)
	if err != nil {
		return BucketMap{}, err
	}
	m := BucketMap{Owners: make([]string, len(table))}
	for b, si := range table {
		m.Owners[b] = shardNames[si]
	}
	if len(hot) > 0 {
		known := make(map[string]bool, len(shardNames))
		for _, n := range shardNames {
			known[n] = true
		}
		m.HotUsers = make(map[int64]string, len(hot))
		for u, n := range hot {
			if !known[n] {
				return BucketMap{}, fmt.Errorf("%w: hot user %d names shard %q", ErrUnknownShard, u, n)
			}
			m.HotUsers[u] = n
		}
	}
	return m, nil
}

// Clone returns a deep copy of m.
func (m BucketMap) Clone() BucketMap {
	out := BucketMap{Version: m.Version, Owners: slices.Clone(m.Owners)}
	if m.HotUsers != nil {
		out.HotUsers = maps.Clone(m.HotUsers)
	}
	return out
}

// Shards returns the shards that own at least one bucket, in the order of
// the first bucket each owns.
func (m BucketMap) Shards() []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range m.Owners {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// Apply returns a copy of m in which mv.To owns mv.Buckets; every bucket
// of the move must be owned by mv.From in m. The version is m's (Publish
// assigns the next one).
func (m BucketMap) Apply(mv PlannedMove) (BucketMap, error) {
	if mv.To == "" || mv.From == mv.To {
		return BucketMap{}, fmt.Errorf("sharding: move from %q to %q: want two different shards", mv.From, mv.To)
	}
	out := m.Clone()
	for _, b := range mv.Buckets {
		if b < 0 || b >= len(out.Owners) {
			return BucketMap{}, fmt.Errorf("sharding: move of bucket %d: the map has buckets 0-%d", b, len(out.Owners)-1)
		}
		if out.Owners[b] != mv.From {
			return BucketMap{}, fmt.Errorf("sharding: move of bucket %d from %q: it is owned by %q", b, mv.From, out.Owners[b])
		}
		out.Owners[b] = mv.To
	}
	return out, nil
}

// PlanDoubling plans the doubling of the shards of m (4 -> 8, the source
// design's way to grow): every shard that owns buckets, taken in the order
// of the first bucket it owns (for EvenBuckets, configuration order),
// gives the upper half of each of its contiguous bucket ranges to one new
// shard, shard i to newShards[i] (a range of n buckets keeps its first
// ceil(n/2)). It returns one move per shard and the map after every move;
// hot users stay where they are. len(newShards) must equal the number of
// shards owning buckets, the new names must be distinct and must not own
// anything in m, and every shard must have a range of two buckets or
// more.
func PlanDoubling(m BucketMap, newShards []string) ([]PlannedMove, BucketMap, error) {
	olds := m.Shards()
	if len(olds) == 0 {
		return nil, BucketMap{}, fmt.Errorf("sharding: plan doubling: the map has no bucket")
	}
	if len(newShards) != len(olds) {
		return nil, BucketMap{}, fmt.Errorf("sharding: plan doubling: %d new shards for %d shards owning buckets (%v)", len(newShards), len(olds), olds)
	}
	taken := map[string]bool{}
	for _, n := range olds {
		taken[n] = true
	}
	for _, n := range m.HotUsers {
		taken[n] = true
	}
	for _, n := range newShards {
		if n == "" || taken[n] {
			return nil, BucketMap{}, fmt.Errorf("sharding: plan doubling: new shard %q is empty, repeated or already in the map", n)
		}
		taken[n] = true
	}
	index := make(map[string]int, len(olds))
	for i, n := range olds {
		index[n] = i
	}
	moves := make([]PlannedMove, len(olds))
	for i, n := range olds {
		moves[i] = PlannedMove{From: n, To: newShards[i]}
	}
	for first := 0; first < len(m.Owners); {
		last := first
		for last+1 < len(m.Owners) && m.Owners[last+1] == m.Owners[first] {
			last++
		}
		mv := &moves[index[m.Owners[first]]]
		keep := (last - first + 2) / 2 // ceil(n/2)
		for b := first + keep; b <= last; b++ {
			mv.Buckets = append(mv.Buckets, b)
		}
		first = last + 1
	}
	next := m
	for _, mv := range moves {
		if len(mv.Buckets) == 0 {
			return nil, BucketMap{}, fmt.Errorf("sharding: plan doubling: shard %q has no range of two buckets or more to halve", mv.From)
		}
		var err error
		if next, err = next.Apply(mv); err != nil {
			return nil, BucketMap{}, err
		}
	}
	return moves, next, nil
}
