package sharding

import (
	"fmt"
	"slices"
	"time"
)

// routing is one immutable snapshot of the bucket map as routing uses it.
// The plugin holds the current one in an atomic pointer; a statement takes
// it once (in sharding:route) and places every key and ID with it, so a
// map change never splits a statement between two versions. Nothing in a
// snapshot is modified after it is published.
type routing struct {
	version     int64
	shards      int           // configured shards
	bucketShard []uint8       // bucket -> shard index
	hot         map[int64]int // user -> shard index
	// owning is the set of shards that own a bucket or a hot user: where
	// a read without a key scatters (a shard being filled by a move, or
	// added for one, owns nothing yet).
	owning uint64
	// own[i] is what shard i owns, as the ownership predicate of scatter
	// reads needs it (ownership.go).
	own []shardOwn
	// lag are the moves catching up (MoveCatchingUp) whose shards are
	// configured, for reads that accept a lag (AllowLag).
	lag []lagMove
	// pending is the number of moves in the snapshot that are neither
	// done nor rolled back: while there is one, rows of a bucket may be on
	// two shards, and raw SQL scatter reads are refused.
	pending int
	// loaded is the plugin clock (Sharding.now) at the start of the Load
	// this snapshot came from; 0 for the map built from Config.
	loaded int64
	m      BucketMap // as loaded (names), for Map
}

// lagMove is a move a read that accepts a lag may read from the target of.
type lagMove struct {
	to          int
	buckets     []int
	caughtUpAge time.Duration // < 0: never caught up
}

// bucketOf is the bucket of a key (Algorithm.Bucket: key mod buckets).
func (rt *routing) bucketOf(key int64) int {
	return int(uint64(key) % uint64(len(rt.bucketShard)))
}

// newRouting binds m to the configured shards. It refuses a map whose
// bucket count is not buckets or that names a shard that is not
// configured.
func newRouting(m BucketMap, buckets int, byName map[string]*shard) (*routing, error) {
	if len(m.Owners) != buckets {
		return nil, fmt.Errorf("%w: bucket map version %d has %d buckets, the algorithm %d (the bucket count never changes)", ErrConfig, m.Version, len(m.Owners), buckets)
	}
	rt := &routing{version: m.Version, shards: len(byName), bucketShard: make([]uint8, buckets), m: m.Clone()}
	for b, name := range m.Owners {
		sh := byName[name]
		if sh == nil {
			return nil, fmt.Errorf("%w: bucket map version %d gives bucket %d to shard %q", ErrUnknownShard, m.Version, b, name)
		}
		rt.bucketShard[b] = uint8(sh.index)
		rt.owning |= 1 << sh.index
	}
	rt.hot = make(map[int64]int, len(m.HotUsers))
	for u, name := range m.HotUsers {
		sh := byName[name]
		if sh == nil {
			return nil, fmt.Errorf("%w: bucket map version %d gives hot user %d to shard %q", ErrUnknownShard, m.Version, u, name)
		}
		rt.hot[u] = sh.index
		rt.owning |= 1 << sh.index
	}
	rt.own = routingOwnership(rt.bucketShard, rt.hot, rt.shards)
	return rt, nil
}

// withMoves returns a copy of rt (sharing its tables) with the moves of a
// new Load and its start time.
func (rt *routing) withMoves(moves []MoveStatus, loaded int64, byName map[string]*shard) *routing {
	out := *rt
	out.loaded = loaded
	out.lag = nil
	out.pending = 0
	for _, mv := range moves {
		if mv.Phase != MoveDone && mv.Phase != MoveRolledBack {
			out.pending++
		}
		if mv.Phase != MoveCatchingUp {
			continue
		}
		to, from := byName[mv.To], byName[mv.From]
		if to == nil || from == nil {
			continue
		}
		var bs []int
		for _, b := range mv.Buckets {
			// Only buckets the source still owns: a stale status must
			// never send a read to a shard the bucket is not being
			// copied to.
			if b >= 0 && b < len(rt.bucketShard) && int(rt.bucketShard[b]) == from.index {
				bs = append(bs, b)
			}
		}
		if len(bs) > 0 {
			out.lag = append(out.lag, lagMove{to: to.index, buckets: slices.Clip(bs), caughtUpAge: mv.CaughtUpAge})
		}
	}
	return &out
}

// lagBuckets returns, for a read that accepts a lag of max at plugin clock
// now, the buckets it reads from a move's target: those whose target
// last caught up at most max ago (CaughtUpAge plus the time since the
// snapshot's Load started). nil when there is none.
func (rt *routing) lagBuckets(max time.Duration, now int64) map[int]int {
	var out map[int]int
	since := time.Duration(now - rt.loaded)
	for _, mv := range rt.lag {
		if mv.caughtUpAge < 0 || mv.caughtUpAge+since > max {
			continue
		}
		if out == nil {
			out = make(map[int]int)
		}
		for _, b := range mv.buckets {
			out[b] = mv.to
		}
	}
	return out
}

// placer places keys and order IDs on shards for one statement: one
// snapshot of the map and, for a read that accepts a lag, the buckets it
// reads from a move's target.
type placer struct {
	rt  *routing
	lag map[int]int // bucket -> shard index
}

// key returns the shard index of a shard key (a user ID).
func (p placer) key(k int64) int {
	if i, ok := p.rt.hot[k]; ok {
		return i
	}
	b := p.rt.bucketOf(k)
	if p.lag != nil {
		if i, ok := p.lag[b]; ok {
			return i
		}
	}
	return int(p.rt.bucketShard[b])
}

// minted returns the shard index encoded in a minted ID.
func (p placer) minted(id int64) (int, bool) {
	d, ok := DecodeID(id)
	if !ok {
		return 0, false
	}
	if d.Hot {
		if d.Shard >= p.rt.shards {
			return 0, false
		}
		return d.Shard, true
	}
	if d.Bucket >= len(p.rt.bucketShard) {
		return 0, false
	}
	if p.lag != nil {
		if i, ok := p.lag[d.Bucket]; ok {
			return i, true
		}
	}
	return int(p.rt.bucketShard[d.Bucket]), true
}
