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
// Reads are lock-free and do not allocate. Positions never expire: the
// memory used is bounded by the number of tables and replicas of the
// database, and a position that is never replaced stays correct (it is
// simply passed by every replica), so there is nothing for a TTL to bound.
type Memory struct {
	tables  sync.Map // table name -> *atomic.Uint64
	max     atomic.Uint64
	unknown atomic.Uint64

	mu       sync.Mutex
	replicas map[string]LSN // every replica ever published, raised per replica
	current  []string       // replicas of the latest PublishReplay call
	minimum  LSN            // minimum over current

	deps    atomic.Pointer[Dependents] // the dependency graph (dependents.go)
	decoded atomic.Uint64              // the tracker's decoded position (decoded.go)
}

// NewMemory returns an empty in-process store.
func NewMemory() *Memory { return &Memory{} }

// WritePosition implements Store. It does not allocate.
func (m *Memory) WritePosition(_ context.Context, tables []string) (LSN, error) {
	if tables == nil {
		return LSN(m.max.Load()), nil
	}
	pos := m.unknown.Load()
	for _, t := range tables {
		if v, ok := m.tables.Load(t); ok {
			pos = max(pos, v.(*atomic.Uint64).Load())
		}
	}
	return LSN(pos), nil
}

// Raise implements Store.
func (m *Memory) Raise(_ context.Context, tables []string, pos LSN) error {
	if pos == 0 {
		return nil
	}
	if tables == nil {
		raise(&m.unknown, uint64(pos))
	}
	for _, t := range tables {
		v, ok := m.tables.Load(t)
		if !ok {
			v, _ = m.tables.LoadOrStore(t, new(atomic.Uint64))
		}
		raise(v.(*atomic.Uint64), uint64(pos))
	}
	raise(&m.max, uint64(pos))
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
func (m *Memory) PublishReplay(_ context.Context, replicas map[string]LSN) error {
	if len(replicas) == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.replicas == nil {
		m.replicas = make(map[string]LSN, len(replicas))
	}
	m.current = m.current[:0]
	first := true
	for name, pos := range replicas {
		pos = max(pos, m.replicas[name])
		m.replicas[name] = pos
		m.current = append(m.current, name)
		if first || pos < m.minimum {
			m.minimum, first = pos, false
		}
	}
	return nil
}

// ReplayPositions implements Store.
func (m *Memory) ReplayPositions(context.Context) (map[string]LSN, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]LSN, len(m.current))
	for _, name := range m.current {
		out[name] = m.replicas[name]
	}
	return out, nil
}

// ReplayPosition returns the minimum replay position over the replicas of
// the latest PublishReplay call, 0 when none. It is not part of Store.
func (m *Memory) ReplayPosition(context.Context) (LSN, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.minimum, nil
}
