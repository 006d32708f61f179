package sharding

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/lsnstore"
)

// ID generator errors.
var (
	// ErrLeaseLost: the generator holds no worker lease it may mint with
	// right now: the lease was not renewed within 0.9 LeaseTTL (Redis
	// unreachable), was taken over, Redis may have lost it (restart
	// without persistence, FLUSHALL, failover, eviction) and the
	// generator is waiting out the lease of whoever may still hold the
	// worker ID, or the generator is closed. Until Close the generator
	// keeps renewing or leasing again in the background and mints again
	// by itself; the wrapping error says why and, when it is waiting, for
	// how long.
	ErrLeaseLost = errors.New("sharding: ID generator lost its worker lease")
	// ErrNoWorker: every worker ID is leased.
	ErrNoWorker = errors.New("sharding: no free worker ID")
	// ErrClockBackwards: the clock went back further than the generator
	// can absorb (MaxAhead) and did not catch up within ClockWait.
	ErrClockBackwards = errors.New("sharding: clock moved backwards")
)

// IDConfig configures an IDGenerator.
type IDConfig struct {
	// Redis leases the worker ID. Nil: Worker is used as is (one process,
	// tests).
	Redis redis.UniversalClient
	// Worker is the fixed worker ID (0..MaxWorkers-1) when Redis is nil.
	Worker int
	// Prefix of the Redis keys. Default "freshread:idgen".
	Prefix string
	// LeaseTTL is the worker lease's TTL, renewed every TTL/3. The
	// generator stops minting when the lease has not been renewed for
	// 0.9 TTL (counted from the moment the last successful renewal was
	// sent). A generator that leases a worker ID after Redis may have
	// lost its state waits one LeaseTTL before it mints. Every generator
	// sharing a Prefix must use the same LeaseTTL. Default 30s.
	LeaseTTL time.Duration
	// MaxAhead is how far past the wall clock a burst (more than 16 IDs in
	// a millisecond for one route code) or a clock step backwards may run
	// the generator's logical clock. Default 100ms.
	MaxAhead time.Duration
	// ClockWait is how long Next waits for the wall clock to catch up
	// before returning ErrClockBackwards. Default 1s.
	ClockWait time.Duration
	// Now is the wall clock. Default time.Now.
	Now func() time.Time
	// Logger receives lease warnings. Default slog.Default().
	Logger *slog.Logger
}

// IDGenerator mints 64-bit IDs in the layout documented at IDEpoch: time
// ordered, embedding a route code (the user's bucket or hot shard), unique
// across processes through a leased worker ID. Safe for concurrent use;
// lock-free (one CAS per ID).
type IDGenerator struct {
	cfg     IDConfig
	tagged  bool // hash-tagged key names (workerKey)
	aheadMs int64
	started time.Time // the origin of the lease times (monotonic)

	lease  atomic.Pointer[idLease] // nil: none (leasing again)
	closed atomic.Bool

	state [1 << idRouteBits]atomic.Uint64 // per route code: ms<<idSeqBits | seq

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// idLease is one worker lease: Next mints with worker while the
// generator's monotonic clock is in [from, until) and the lease is not
// revoked. A new lease (another worker ID, token or epoch) is a new
// idLease, so an ID is always composed with the worker ID of the lease
// that Next checked.
type idLease struct {
	worker int
	token  string // the lease key's value
	epoch  string // the worker's epoch key's value when leased
	from   int64  // ns since started: the end of the wait after a possible loss
	until  atomic.Int64
	// revoked: renewal found the lease gone, taken over, or of an older
	// epoch of Redis's data.
	revoked atomic.Bool
}

// NewIDGenerator leases a worker ID (from Redis when configured) and starts
// renewing it. When Redis may have lost its state since the worker ID was
// last leased (and the first time a Prefix is used on a server), it waits
// one LeaseTTL before returning, so that no generator that may still hold
// the worker ID mints at the same time; ctx bounds that wait.
func NewIDGenerator(ctx context.Context, cfg IDConfig) (*IDGenerator, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = "freshread:idgen"
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 30 * time.Second
	}
	if cfg.MaxAhead <= 0 {
		cfg.MaxAhead = 100 * time.Millisecond
	}
	if cfg.ClockWait <= 0 {
		cfg.ClockWait = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	g := &IDGenerator{cfg: cfg, aheadMs: cfg.MaxAhead.Milliseconds(), started: time.Now(), stop: make(chan struct{})}
	for i := range g.state {
		g.state[i].Store(IDsPerMillisecond - 1)
	}
	lsnstore.WatchRedis(cfg.Redis) // a refused command is logged and counted; failures name their cause
	if cfg.Redis == nil {
		if cfg.Worker < 0 || cfg.Worker >= MaxWorkers {
			return nil, fmt.Errorf("%w: worker %d (want 0..%d)", ErrConfig, cfg.Worker, MaxWorkers-1)
		}
		l := &idLease{worker: cfg.Worker}
		l.until.Store(math.MaxInt64)
		g.lease.Store(l)
		return g, nil
	}
	_, single := cfg.Redis.(*redis.Client)
	g.tagged = !single
	l, err := g.acquire(ctx)
	if err != nil {
		return nil, err
	}
	g.lease.Store(l)
	g.wg.Add(1)
	go g.renewLoop()
	if wait := time.Duration(l.from) - time.Since(g.started); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			g.Close()
			return nil, fmt.Errorf("sharding: wait out worker %d's lease after a possible Redis loss: %w", l.worker, ctx.Err())
		}
	}
	return g, nil
}

// Worker is the leased worker ID (-1 while the generator holds none).
func (g *IDGenerator) Worker() int {
	if l := g.lease.Load(); l != nil {
		return l.worker
	}
	return -1
}

// workerKey, hwmKey and epochKey name worker i's lease, high-water mark
// and epoch; fenceKey marks the wait after a new epoch. The lease scripts
// touch all four, so on a Redis Cluster (any client but a *redis.Client)
// they share a hash tag, "{<prefix>:<i>}", and one slot (the epoch then
// speaks of the server that holds the lease); on a single server and
// behind Sentinel the lease and the high-water mark keep their first
// names (<prefix>:worker:<i>, <prefix>:hwm:<i>), so that generators of
// earlier versions sharing the server see the same leases. A Cluster never
// worked with the first names (the renewal failed with CROSSSLOT), so no
// earlier generator holds a lease there.
func (g *IDGenerator) workerKey(i int) string { return g.key("worker", i) }

func (g *IDGenerator) hwmKey(i int) string { return g.key("hwm", i) }

func (g *IDGenerator) epochKey(i int) string { return g.key("epoch", i) }

func (g *IDGenerator) fenceKey(i int) string { return g.key("fence", i) }

func (g *IDGenerator) key(kind string, i int) string {
	if g.tagged {
		return "{" + g.cfg.Prefix + ":" + strconv.Itoa(i) + "}:" + kind
	}
	return g.cfg.Prefix + ":" + kind + ":" + strconv.Itoa(i)
}

func (g *IDGenerator) keys(i int) []string {
	return []string{g.workerKey(i), g.hwmKey(i), g.epochKey(i), g.fenceKey(i)}
}

// The epoch of a worker ID's keys is
// "<run_id>:<master_replid>:<evicted_keys>:<random>" (lsnstore's anchor,
// per worker ID, with the replication ID): the server that held the lease,
// its history as a master and how many keys it had evicted. A restart
// (with or without persistence) changes run_id, a promotion (failover)
// master_replid, an eviction evicted_keys, FLUSHALL deletes the key: each
// makes the epoch stale, as leases granted before may have been lost.
const epochLua = `
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') or '?'
local rid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)') or '?'
local ev = string.match(redis.call('INFO', 'stats'), 'evicted_keys:(%d+)') or '?'
local cur = run .. ':' .. rid .. ':' .. ev .. ':'
local e = redis.call('GET', KEYS[3])
local same = e and string.sub(e, 1, #cur) == cur
`

// acquireScript leases worker KEYS[1] for token ARGV[1] for ARGV[2] ms.
// When the epoch is stale it starts a new one (ARGV[3] random) and sets the
// fence for one lease TTL. It returns {0} when the worker ID is leased,
// else {1, epoch, fenced (0/1), high-water mark}.
var acquireScript = redis.NewScript(epochLua + `
if not same then
  e = cur .. ARGV[3]
  redis.call('SET', KEYS[3], e)
  redis.call('SET', KEYS[4], '1', 'PX', ARGV[2])
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {0} end
local fenced = 0
if redis.call('GET', KEYS[4]) then fenced = 1 end
return {1, e, fenced, redis.call('GET', KEYS[2]) or '0'}`)

// renewScript raises the high-water mark to ARGV[3], then extends the
// lease if it is still token ARGV[1]'s in epoch ARGV[4]: 1. It returns 0
// when the lease is gone or another's, -1 when the epoch changed (then it
// deletes the lease if it is still the token's, so the worker ID is free).
var renewScript = redis.NewScript(epochLua + `
local old = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[3]) > old then redis.call('SET', KEYS[2], ARGV[3]) end
local mine = redis.call('GET', KEYS[1]) == ARGV[1]
if not same or e ~= ARGV[4] then
  if mine then redis.call('DEL', KEYS[1]) end
  return -1
end
if not mine then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`)

var releaseScript = redis.NewScript(`
local old = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) > old then redis.call('SET', KEYS[2], ARGV[2]) end
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// acquire leases a free worker ID. The lease is valid for 0.9 LeaseTTL
// from the moment its SET was sent; its minting starts after one LeaseTTL
// from the reply when the worker's fence is set (Redis may have lost the
// lease of a holder still minting). The per-route clocks are raised to
// the highest millisecond a previous holder of the worker ID recorded, so
// the new holder starts above it even if its clock is behind.
func (g *IDGenerator) acquire(ctx context.Context) (*idLease, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	start := mrand.IntN(MaxWorkers)
	for k := 0; k < MaxWorkers; k++ {
		i := (start + k) % MaxWorkers
		var nonce [8]byte
		_, _ = rand.Read(nonce[:])
		t0 := time.Since(g.started)
		res, err := acquireScript.Run(ctx, g.cfg.Redis, g.keys(i), token, g.cfg.LeaseTTL.Milliseconds(), hex.EncodeToString(nonce[:])).Slice()
		if err != nil {
			return nil, fmt.Errorf("sharding: lease a worker ID: %w", err)
		}
		if len(res) == 0 || res[0] == int64(0) {
			continue
		}
		if len(res) != 4 {
			return nil, fmt.Errorf("sharding: lease a worker ID: unexpected reply %v", res)
		}
		l := &idLease{worker: i, token: token}
		l.epoch, _ = res[1].(string)
		if res[2] == int64(1) {
			l.from = int64(time.Since(g.started) + g.cfg.LeaseTTL)
		}
		l.until.Store(int64(t0 + g.cfg.LeaseTTL*9/10))
		hwm, _ := res[3].(string)
		floor, err := strconv.ParseInt(hwm, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("sharding: read the worker's high-water mark %q: %w", hwm, err)
		}
		g.raise(floor)
		return l, nil
	}
	return nil, ErrNoWorker
}

// raise lifts every route code's clock to millisecond floor and closes the
// millisecond each route code last used, so that the first ID of a new
// lease (maybe another worker ID, which sorts lower within a millisecond)
// is above every ID minted before.
func (g *IDGenerator) raise(floor int64) {
	v := uint64(floor)<<idSeqBits | (IDsPerMillisecond - 1)
	for i := range g.state {
		for {
			old := g.state[i].Load()
			nv := max(old|(IDsPerMillisecond-1), v)
			if nv == old || g.state[i].CompareAndSwap(old, nv) {
				break
			}
		}
	}
}

func (g *IDGenerator) renewLoop() {
	defer g.wg.Done()
	t := time.NewTicker(g.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		if err := g.renew(); err != nil {
			g.cfg.Logger.Warn("freshread: ID generator lease renewal failed", "worker", g.Worker(), "err", err)
		}
	}
}

// renew extends the current lease, or, when there is none or it is lost,
// leases a worker ID again.
func (g *IDGenerator) renew() error {
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.LeaseTTL/3)
	defer cancel()
	l := g.lease.Load()
	if l != nil {
		t0 := time.Since(g.started)
		n, err := renewScript.Run(ctx, g.cfg.Redis, g.keys(l.worker),
			l.token, g.cfg.LeaseTTL.Milliseconds(), g.highWater(), l.epoch).Int()
		if err != nil {
			return err
		}
		if n == 1 {
			l.until.Store(int64(t0 + g.cfg.LeaseTTL*9/10))
			return nil
		}
		l.revoked.Store(true)
		g.lease.CompareAndSwap(l, nil)
		why := "taken over or expired"
		if n < 0 {
			why = "Redis may have lost its state (restart, FLUSHALL, failover or eviction)"
		}
		g.cfg.Logger.Warn("freshread: ID generator lost its worker lease; leasing again", "worker", l.worker, "why", why)
	}
	nl, err := g.acquire(ctx)
	if err != nil {
		return err
	}
	if g.closed.Load() || !g.lease.CompareAndSwap(nil, nl) {
		g.releaseLease(nl)
		return nil
	}
	if nl.from > 0 {
		g.cfg.Logger.Warn("freshread: ID generator waits out a possible previous holder of its worker ID", "worker", nl.worker, "wait", g.cfg.LeaseTTL)
	}
	return nil
}

// highWater is the highest millisecond any route code may reach: the
// highest used plus MaxAhead.
func (g *IDGenerator) highWater() int64 {
	var hi int64
	for i := range g.state {
		if ms := int64(g.state[i].Load() >> idSeqBits); ms > hi {
			hi = ms
		}
	}
	return hi + g.aheadMs
}

func (g *IDGenerator) releaseLease(l *idLease) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return releaseScript.Run(ctx, g.cfg.Redis, []string{g.workerKey(l.worker), g.hwmKey(l.worker)}, l.token, g.highWater()).Err()
}

// Close stops renewing, records the high-water mark and releases the lease.
func (g *IDGenerator) Close() error {
	var err error
	g.closeOnce.Do(func() {
		g.closed.Store(true)
		close(g.stop)
		g.wg.Wait()
		l := g.lease.Swap(nil)
		if l != nil {
			l.revoked.Store(true)
		}
		if g.cfg.Redis != nil && l != nil {
			err = g.releaseLease(l)
		}
	})
	return err
}

// usable returns nil when Next may mint with l now, else why not.
func (g *IDGenerator) usable(l *idLease) error {
	switch {
	case g.closed.Load():
		return fmt.Errorf("%w: the generator is closed", ErrLeaseLost)
	case l == nil:
		return fmt.Errorf("%w: leasing a worker ID again", ErrLeaseLost)
	case l.revoked.Load():
		return fmt.Errorf("%w: worker %d's lease was lost", ErrLeaseLost, l.worker)
	}
	now := int64(time.Since(g.started))
	if now < l.from {
		return fmt.Errorf("%w: worker %d waits out a possible previous holder after Redis may have lost its state, %s more", ErrLeaseLost, l.worker, time.Duration(l.from-now).Round(time.Millisecond))
	}
	if now >= l.until.Load() {
		return fmt.Errorf("%w: worker %d's lease was not renewed in time", ErrLeaseLost, l.worker)
	}
	return nil
}

// Next mints an ID for route code route (0..2047; see Sharding.NewID,
// which derives it from a user ID). It checks the lease before and after
// taking the ID, so an ID is returned only if the lease was valid after
// its millisecond was chosen (a process paused in between returns
// ErrLeaseLost, not an ID another holder may mint).
func (g *IDGenerator) Next(route int) (int64, error) {
	if route < 0 || route > routeMask {
		return 0, fmt.Errorf("sharding: route code %d out of range", route)
	}
	st := &g.state[route]
	var waited time.Duration
	for {
		l := g.lease.Load()
		if err := g.usable(l); err != nil {
			return 0, err
		}
		wall := g.cfg.Now()
		now := wall.Sub(IDEpoch).Milliseconds()
		for {
			old := st.Load()
			last, seq := int64(old>>idSeqBits), old&(IDsPerMillisecond-1)
			var ms int64
			var sq uint64
			switch {
			case now > last:
				ms, sq = now, 0
			case seq < IDsPerMillisecond-1:
				ms, sq = last, seq+1
			default:
				ms, sq = last+1, 0
			}
			if ms > now+g.aheadMs {
				break // too far ahead of the clock: wait for it
			}
			if ms > maxTimeMs || ms < 0 {
				return 0, fmt.Errorf("sharding: clock outside the ID layout's range (%s..+%d years)", IDEpoch.Format(time.DateOnly), maxTimeMs/(365*24*3600*1000))
			}
			if st.CompareAndSwap(old, uint64(ms)<<idSeqBits|sq) {
				if err := g.usable(l); err != nil {
					return 0, err
				}
				return composeID(ms, route, l.worker, int(sq)), nil
			}
		}
		if waited >= g.cfg.ClockWait {
			return 0, ErrClockBackwards
		}
		time.Sleep(time.Millisecond)
		waited += time.Millisecond
	}
}
