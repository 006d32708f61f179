package reshard

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/freshread/freshread/sharding"
)

// memStore is a sharding.MapStore in memory, for the tests.
type memStore struct {
	mu       sync.Mutex
	m        sharding.BucketMap
	found    bool
	moves    map[string]sharding.MoveStatus
	caughtAt map[string]time.Time
	clients  map[string]memClient
	// publishErr, when set, is returned by the next Publish (after
	// publishing when publishCommits).
	publishErr     error
	publishCommits bool
	publishes      int
}

type memClient struct {
	v     int64
	lease time.Duration
	at    time.Time
}

func newMemStore(owners []string) *memStore {
	return &memStore{
		m:     sharding.BucketMap{Version: 1, Owners: slices.Clone(owners)},
		found: true, moves: map[string]sharding.MoveStatus{}, caughtAt: map[string]time.Time{}, clients: map[string]memClient{},
	}
}

func (s *memStore) Load(context.Context) (sharding.BucketMap, []sharding.MoveStatus, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.m
	m.Owners = slices.Clone(m.Owners)
	var moves []sharding.MoveStatus
	for id, st := range s.moves {
		if st.Phase == sharding.MoveDone || st.Phase == sharding.MoveRolledBack {
			continue
		}
		st.CaughtUpAge = -1
		if at, ok := s.caughtAt[id]; ok {
			st.CaughtUpAge = time.Since(at)
		}
		moves = append(moves, st)
	}
	return m, moves, s.found, nil
}

func (s *memStore) Publish(_ context.Context, prev int64, m sharding.BucketMap) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.publishErr; err != nil && !s.publishCommits {
		s.publishErr = nil
		return 0, err
	}
	cur := int64(0)
	if s.found {
		cur = s.m.Version
	}
	if cur != prev {
		return 0, sharding.ErrMapConflict
	}
	m.Version = prev + 1
	m.Owners = slices.Clone(m.Owners)
	s.m, s.found = m, true
	s.publishes++
	if err := s.publishErr; err != nil {
		s.publishErr = nil
		return 0, err
	}
	return m.Version, nil
}

func (s *memStore) SaveMove(_ context.Context, st sharding.MoveStatus, caughtUp time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.moves[st.ID] = st
	if caughtUp >= 0 {
		s.caughtAt[st.ID] = time.Now().Add(-caughtUp)
	}
	return nil
}

func (s *memStore) Ack(_ context.Context, client string, v int64, lease time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clients[client] = memClient{v: v, lease: lease, at: time.Now()}
	return nil
}

func (s *memStore) Clients(context.Context) ([]sharding.MapClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sharding.MapClient
	for id, c := range s.clients {
		out = append(out, sharding.MapClient{ID: id, Version: c.v, Age: time.Since(c.at), Lease: c.lease})
	}
	return out, nil
}

func (s *memStore) owners() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.m.Owners)
}

func (s *memStore) move(id string) (sharding.MoveStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.moves[id]
	return st, ok
}

var _ sharding.MapStore = (*memStore)(nil)
