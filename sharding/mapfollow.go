package sharding

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the map follower's Config fields.
const (
	DefaultMapRefresh = 100 * time.Millisecond
	DefaultMapLease   = 2 * time.Second
	DefaultMoveWait   = 5 * time.Second
)

// clockBase is the origin of the plugin clock (monoNow): monotonic time,
// immune to wall-clock steps.
var clockBase = time.Now()

func monoNow() int64 { return int64(time.Since(clockBase)) }

// never is the lease start of a process that has not refreshed yet.
const never = math.MinInt64 / 2

// follower follows Config.Map: it reloads the map every MapRefresh,
// swaps the routing snapshot when the version changes, acknowledges the
// version it routes with, and keeps the lease.
type follower struct {
	store   MapStore
	every   time.Duration
	lease   time.Duration
	client  string
	log     *slog.Logger
	buckets int

	// leaseStart is monoNow at the start of the Load of the last
	// successful refresh (loaded, valid, acknowledged).
	leaseStart atomic.Int64
	lastErr    atomic.Pointer[error] // of the last failed refresh

	ctx     context.Context // canceled by Close
	cancel  context.CancelFunc
	started atomic.Bool
	done    chan struct{} // closed when the goroutine ends

	mu     sync.Mutex
	flight *flight // the refresh in progress
	// Logging state (under mu): report a failing store once until it
	// recovers, and an invalid version once.
	failing    bool
	badVersion int64
}

// flight is one refresh, shared by everyone who asks for one meanwhile.
type flight struct {
	done chan struct{}
	err  error
}

// mapStats are the counters of the map metrics (Collector).
type mapStats struct {
	refreshErrors atomic.Uint64
	bucketMoved   atomic.Uint64
	retries       atomic.Uint64
	staleRefusals atomic.Uint64
}

// setupMap checks the map fields of the configuration and prepares the
// follower (started by Initialize).
func (s *Sharding) setupMap() error {
	cfg := &s.cfg
	if cfg.MapRefresh < 0 || cfg.MapLease < 0 {
		return fmt.Errorf("%w: negative MapRefresh or MapLease", ErrConfig)
	}
	if cfg.MapRefresh == 0 {
		cfg.MapRefresh = DefaultMapRefresh
	}
	if cfg.MapLease == 0 {
		cfg.MapLease = DefaultMapLease
	}
	if cfg.MoveWait == 0 {
		cfg.MoveWait = DefaultMoveWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ClientID == "" {
		cfg.ClientID = defaultClientID()
	}
	if cfg.Map == nil {
		return nil
	}
	if cfg.MapLease <= cfg.MapRefresh {
		return fmt.Errorf("%w: MapLease %s must be longer than MapRefresh %s (the lease would run out between refreshes)", ErrConfig, cfg.MapLease, cfg.MapRefresh)
	}
	f := &follower{
		store:   cfg.Map,
		every:   cfg.MapRefresh,
		lease:   cfg.MapLease,
		client:  cfg.ClientID,
		log:     cfg.Logger,
		buckets: cfg.Algorithm.Buckets(),
		done:    make(chan struct{}),
	}
	f.leaseStart.Store(never)
	f.ctx, f.cancel = context.WithCancel(context.Background())
	s.fol = f
	return nil
}

// defaultClientID is hostname-pid-random.
func defaultClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// startFollower loads the map once (a failure leaves the process without
// a lease: sharded statements try to refresh and fail with ErrMapStale
// until the store answers) and starts the follower goroutine.
func (s *Sharding) startFollower() {
	f := s.fol
	if f == nil {
		return
	}
	if err := s.refresh(f.ctx); err != nil {
		f.log.Warn("sharding: first load of the bucket map failed; sharded statements are refused until it succeeds", "err", err)
	}
	f.started.Store(true)
	go s.follow()
}

func (s *Sharding) follow() {
	f := s.fol
	defer close(f.done)
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
			_ = s.refresh(f.ctx)
		}
	}
}

// stopFollower stops the follower goroutine and waits for it.
func (s *Sharding) stopFollower() {
	f := s.fol
	if f == nil || f.cancel == nil {
		return
	}
	f.cancel()
	if f.started.Load() {
		<-f.done
	}
}

// MapVersion returns the version of the bucket map the plugin routes with
// (0: the map built from Config).
func (s *Sharding) MapVersion() int64 { return s.rt.Load().version }

// Map returns a copy of the bucket map the plugin routes with.
func (s *Sharding) Map() BucketMap { return s.rt.Load().m.Clone() }

// RefreshMap loads the shared map now (what the follower does every
// Config.MapRefresh) and returns the error of the refresh; nil without
// Config.Map. The load it reports starts after the call: a refresh
// already in progress may have read the store before a version the
// caller just published, so it is waited for, and a refresh started
// after it is joined or run.
func (s *Sharding) RefreshMap(ctx context.Context) error {
	f := s.fol
	if f == nil {
		return nil
	}
	f.mu.Lock()
	fl := f.flight
	f.mu.Unlock()
	if fl != nil {
		if err := fl.wait(ctx); err != nil {
			return err
		}
	}
	return s.refresh(ctx)
}

// wait waits until the refresh fl is done (its outcome is then fl.err),
// or returns an error of ctx when the caller gives up first.
func (fl *flight) wait(ctx context.Context) error {
	select {
	case <-fl.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sharding: wait for the bucket map refresh: %w", ctx.Err())
	}
}

// refresh runs one refresh, or joins the one in progress. The refresh
// itself runs under the follower's context (so that a caller giving up
// does not fail it for the others), bounded by the lease: a Load slower
// than the lease could not renew it anyway.
func (s *Sharding) refresh(ctx context.Context) error {
	f := s.fol
	f.mu.Lock()
	if fl := f.flight; fl != nil {
		f.mu.Unlock()
		if err := fl.wait(ctx); err != nil {
			return err
		}
		return fl.err
	}
	fl := &flight{done: make(chan struct{})}
	f.flight = fl
	f.mu.Unlock()

	rctx, cancel := context.WithTimeout(f.ctx, f.lease)
	fl.err = s.refreshOnce(rctx)
	cancel()
	if fl.err != nil && f.ctx.Err() != nil {
		// Close canceled the refresh: a normal stop, not a failing store.
		f.mu.Lock()
		f.flight = nil
		f.mu.Unlock()
		close(fl.done)
		return fl.err
	}

	f.mu.Lock()
	f.flight = nil
	recovered := f.failing && fl.err == nil
	first := !f.failing && fl.err != nil
	f.failing = fl.err != nil
	f.mu.Unlock()
	close(fl.done)
	switch {
	case first:
		f.log.Error("sharding: bucket map refresh failed", "err", fl.err, "version", s.MapVersion(), "lease", f.lease)
	case recovered:
		f.log.Info("sharding: bucket map refresh works again", "version", s.MapVersion())
	}
	if fl.err != nil {
		s.stats.refreshErrors.Add(1)
		err := fl.err
		f.lastErr.Store(&err)
	}
	return fl.err
}

// refreshOnce loads the map, adopts a new valid version (swap the
// snapshot, then acknowledge), acknowledges the version in use otherwise
// (heartbeat) and renews the lease. An invalid map, a version older than
// the one in use or a store that lost its map is refused: the old
// snapshot stays, nothing is acknowledged and the lease is not renewed,
// so the process stops routing when it runs out instead of routing wrong.
func (s *Sharding) refreshOnce(ctx context.Context) error {
	f := s.fol
	start := monoNow()
	m, moves, found, err := f.store.Load(ctx)
	if err != nil {
		return fmt.Errorf("sharding: refresh the bucket map: %w", err)
	}
	cur := s.rt.Load()
	var next *routing
	switch {
	case !found && cur.version != 0:
		return f.refuse(cur.version, fmt.Errorf("sharding: the map store holds no bucket map, but version %d was loaded from it: keeping version %d (a lost map must be restored, not replaced by Config's)", cur.version, cur.version))
	case !found:
		next = cur.withMoves(moves, start, s.byName)
	case m.Version < cur.version:
		return f.refuse(m.Version, fmt.Errorf("sharding: the map store holds bucket map version %d, older than version %d in use: keeping version %d", m.Version, cur.version, cur.version))
	case m.Version == cur.version:
		next = cur.withMoves(moves, start, s.byName)
	default:
		rt, err := newRouting(m, f.buckets, s.byName)
		if err != nil {
			return f.refuse(m.Version, fmt.Errorf("sharding: refuse bucket map version %d, keeping version %d: %w", m.Version, cur.version, err))
		}
		next = rt.withMoves(moves, start, s.byName)
	}
	s.rt.Store(next)
	if next.version != cur.version {
		f.log.Info("sharding: bucket map version changed", "from", cur.version, "to", next.version, "buckets_moved", changedBuckets(cur, next), "client", f.client)
	}
	if err := f.store.Ack(ctx, f.client, next.version, f.lease); err != nil {
		return fmt.Errorf("sharding: acknowledge bucket map version %d: %w", next.version, err)
	}
	for {
		old := f.leaseStart.Load()
		if start <= old || f.leaseStart.CompareAndSwap(old, start) {
			break
		}
	}
	return nil
}

// refuse logs a refused map once per version and returns err.
func (f *follower) refuse(version int64, err error) error {
	f.mu.Lock()
	first := f.badVersion != version
	f.badVersion = version
	f.mu.Unlock()
	if first {
		f.log.Error("sharding: bucket map refused; the lease will run out and sharded statements will be refused until a valid map is published", "err", err, "lease", f.lease)
	}
	return err
}

func changedBuckets(a, b *routing) int {
	n := 0
	for i := range a.bucketShard {
		if i < len(b.bucketShard) && a.bucketShard[i] != b.bucketShard[i] {
			n++
		}
	}
	return n
}

// leased returns the snapshot to route with: while the lease holds, the
// snapshot in use now; once it has run out, the snapshot of a refresh
// made now, or ErrMapStale. rt (the snapshot the statement loaded first)
// is not returned as it is: it may have been loaded after the lease ran
// out and before a refresh adopted a newer version and renewed the lease,
// and that lease covers the newer snapshot, not rt.
func (s *Sharding) leased(ctx context.Context, rt *routing) (*routing, error) {
	f := s.fol
	if monoNow()-f.leaseStart.Load() <= int64(f.lease) {
		return s.rt.Load(), nil
	}
	err := s.refresh(ctx)
	if monoNow()-f.leaseStart.Load() <= int64(f.lease) {
		return s.rt.Load(), nil
	}
	s.stats.staleRefusals.Add(1)
	since := "never refreshed"
	if ls := f.leaseStart.Load(); ls != never {
		since = fmt.Sprintf("last refreshed %s ago", time.Duration(monoNow()-ls).Round(time.Millisecond))
	}
	if err == nil {
		if p := f.lastErr.Load(); p != nil {
			err = *p
		} else {
			err = errors.New("no refresh succeeded")
		}
	}
	return nil, fmt.Errorf("%w (%s, lease %s, version %d): %w", ErrMapStale, since, f.lease, rt.version, err)
}
