package lsnstore

import (
	"context"
	"sync"
	"sync/atomic"
)

// Memory is a Store kept in the memory of one process, for applications
// whose writes and reads all go through that process. The zero value is
// ready to use; NewMemory returns one.
//
// Reads are lock-free and allocate nothing for positions without named
// lanes. Positions never expire: the memory used is bounded by the number
// of tables and replicas of the database, and a position that is never
// replaced stays correct (it is simply passed by every replica), so there
// is nothing for a TTL to bound. Key positions (keys.go) are bounded by
// folding them into their tables' unkeyed positions (memory_keys.go).
type Memory struct {
	tables  sync.Map // table name -> *positionCell
	keys    sync.Map // KeyName -> *keyCell (memory_keys.go)
	sigs    sync.Map // table -> its key signature (string)
	nkeys   atomic.Int64
	foldMu  sync.Mutex
	max     positionCell
	unknown positionCell

	mu       sync.Mutex
	replicas map[string]Position // every replica ever published, raised per replica
	current  []string            // replicas of the latest PublishReplay call
	minimum  Position            // minimum over current

	deps    atomic.Pointer[Dependents] // the dependency graph (dependents.go)
	decoded atomic.Uint64              // the tracker's decoded position (decoded.go)

	schema memorySchema // the schema generation and marks (schema.go)
}

// positionCell holds a position that only grows, lane by lane, without a
// lock: the main lane in an atomic integer, the named lanes behind an
// atomic pointer replaced by compare-and-swap. Each part only grows, so a
// reader that loads both after a raise returned sees at least the raised
// position.
type positionCell struct {
	main  atomic.Uint64
	lanes atomic.Pointer[[]Lane]
	// unkeyed is a plain table's unkeyed position (memory_keys.go).
	unkeyed *positionCell
}

func (c *positionCell) load() Position {
	p := Position{main: LSN(c.main.Load())}
	if l := c.lanes.Load(); l != nil {
		p.lanes = *l
	}
	return p
}

func (c *positionCell) raise(pos Position) {
	raise(&c.main, uint64(pos.main))
	if len(pos.lanes) == 0 {
		return
	}
	for {
		old := c.lanes.Load()
		var cur []Lane
		if old != nil {
			cur = *old
		}
		if coversLanes(cur, pos.lanes) {
			return
		}
		merged := Position{lanes: cur}.Merge(Position{lanes: pos.lanes}).lanes
		if c.lanes.CompareAndSwap(old, &merged) {
			return
		}
	}
}

// NewMemory returns an empty in-process store.
func NewMemory() *Memory { return &Memory{} }

// WritePosition implements Store. It does not lock, and allocates only to
// merge positions with named lanes that neither covers.
func (m *Memory) WritePosition(_ context.Context, tables []string) (Position, error) {
	if tables == nil {
		return m.max.load(), nil
	}
	pos := m.unknown.load()
	// Key positions first, then the rest (unkeyed positions): see keyCell.
	for _, t := range tables {
		if isKeyName(t) {
			if v, ok := m.keys.Load(t); ok {
				pos = pos.Merge(v.(*keyCell).load())
			}
		}
	}
	for _, t := range tables {
		if !isKeyName(t) {
			if v, ok := m.tables.Load(t); ok {
				pos = pos.Merge(v.(*positionCell).load())
			}
		}
	}
	return pos, nil
}

// Raise implements Store.
func (m *Memory) Raise(_ context.Context, tables []string, pos Position) error {
	if pos.IsZero() {
		return nil
	}
	if tables == nil {
		m.unknown.raise(pos)
	}
	for _, t := range tables {
		m.raiseName(t, pos)
	}
	m.max.raise(pos)
	return nil
}

// raise sets a to v unless it already holds at least v.
func raise(a *atomic.Uint64, v uint64) {
	for {
		cur := a.Load()
		if cur >= v || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// PublishReplay implements Store.
func (m *Memory) PublishReplay(_ context.Context, replicas map[string]Position) error {
	if len(replicas) == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.replicas == nil {
		m.replicas = make(map[string]Position, len(replicas))
	}
	m.current = m.current[:0]
	first := true
	for name, pos := range replicas {
		pos = pos.Merge(m.replicas[name])
		m.replicas[name] = pos
		m.current = append(m.current, name)
		if first {
			m.minimum, first = pos, false
		} else {
			m.minimum = m.minimum.Min(pos)
		}
	}
	return nil
}

// ReplayPositions implements Store.
func (m *Memory) ReplayPositions(context.Context) (map[string]Position, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Position, len(m.current))
	for _, name := range m.current {
		out[name] = m.replicas[name]
	}
	return out, nil
}

// ReplayPosition returns the minimum replay position (per lane) over the
// replicas of the latest PublishReplay call, the zero position when none.
// It is not part of Store.
func (m *Memory) ReplayPosition(context.Context) (Position, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.minimum, nil
}
