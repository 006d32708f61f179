package classify

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// lruCache is a sharded LRU keyed by SQL text. Each shard has its own mutex,
// so concurrent hits on different texts rarely contend; there is no global
// lock on the hit path.
type lruCache struct {
	seed   maphash.Seed
	gen    atomic.Uint64
	shards []lruShard
	mask   uint64
}

type lruShard struct {
	mu    sync.Mutex
	cap   int
	items map[string]*lruEntry
	head  lruEntry // sentinel: head.next is the most recently used entry
}

type lruEntry struct {
	key        string
	val        Result
	prev, next *lruEntry
}

func newLRUCache(size int) *lruCache {
	n := 16
	for n > 1 && size/n < 8 {
		n /= 2
	}
	c := &lruCache{seed: maphash.MakeSeed(), shards: make([]lruShard, n), mask: uint64(n - 1)}
	per := (size + n - 1) / n
	for i := range c.shards {
		s := &c.shards[i]
		s.cap = per
		s.items = make(map[string]*lruEntry)
		s.head.next, s.head.prev = &s.head, &s.head
	}
	return c
}

func (c *lruCache) shard(key string) *lruShard {
	return &c.shards[maphash.String(c.seed, key)&c.mask]
}

func (c *lruCache) generation() uint64 { return c.gen.Load() }

func (c *lruCache) get(key string) (Result, bool) {
	s := c.shard(key)
	s.mu.Lock()
	e, ok := s.items[key]
	if !ok {
		s.mu.Unlock()
		return Result{}, false
	}
	s.moveToFront(e)
	v := e.val
	s.mu.Unlock()
	return v, true
}

// add stores val unless the cache was purged since gen was read (the result
// may then be stale).
func (c *lruCache) add(key string, val Result, gen uint64) {
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.gen.Load() != gen {
		return
	}
	if e, ok := s.items[key]; ok {
		e.val = val
		s.moveToFront(e)
		return
	}
	var e *lruEntry
	if len(s.items) >= s.cap {
		e = s.head.prev // least recently used, reused
		s.unlink(e)
		delete(s.items, e.key)
	} else {
		e = new(lruEntry)
	}
	e.key, e.val = key, val
	s.items[key] = e
	s.pushFront(e)
}

func (c *lruCache) purge() {
	c.gen.Add(1)
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.items = make(map[string]*lruEntry)
		s.head.next, s.head.prev = &s.head, &s.head
		s.mu.Unlock()
	}
}

func (c *lruCache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.items)
		s.mu.Unlock()
	}
	return n
}

func (s *lruShard) unlink(e *lruEntry) {
	e.prev.next = e.next
	e.next.prev = e.prev
}

func (s *lruShard) pushFront(e *lruEntry) {
	e.prev = &s.head
	e.next = s.head.next
	s.head.next.prev = e
	s.head.next = e
}

func (s *lruShard) moveToFront(e *lruEntry) {
	if s.head.next == e {
		return
	}
	s.unlink(e)
	s.pushFront(e)
}
