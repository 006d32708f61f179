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
)

// ID generator errors.
var (
	// ErrLeaseLost: the generator's worker lease expired (Redis unreachable
	// for longer than the TTL) or was taken over; it mints no more IDs.
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
	// 0.9 TTL. Default 30s.
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
	cfg      IDConfig
	worker   int
	token    string
	tagged   bool // hash-tagged key names (workerKey)
	aheadMs  int64
	started  time.Time
	validFor atomic.Int64 // nanoseconds since started until which the lease is valid
	lost     atomic.Bool

	state [1 << idRouteBits]atomic.Uint64 // per route code: ms<<idSeqBits | seq

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// NewIDGenerator leases a worker ID (from Redis when configured) and starts
// renewing it.
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
	if cfg.Redis != nil {
		_, single := cfg.Redis.(*redis.Client)
		g.tagged = !single
	}
	floor := int64(0)
	if cfg.Redis == nil {
		if cfg.Worker < 0 || cfg.Worker >= MaxWorkers {
			return nil, fmt.Errorf("%w: worker %d (want 0..%d)", ErrConfig, cfg.Worker, MaxWorkers-1)
		}
		g.worker = cfg.Worker
		g.validFor.Store(math.MaxInt64)
	} else {
		var err error
		if floor, err = g.acquire(ctx); err != nil {
			return nil, err
		}
	}
	for i := range g.state {
		g.state[i].Store(uint64(floor)<<idSeqBits | (IDsPerMillisecond - 1))
	}
	if cfg.Redis != nil {
		g.wg.Add(1)
		go g.renewLoop()
	}
	return g, nil
}

// Worker is the leased worker ID.
func (g *IDGenerator) Worker() int { return g.worker }

// workerKey and hwmKey name worker i's lease and high-water mark. The
// lease scripts touch both, so on a Redis Cluster (any client but a
// *redis.Client) they share a hash tag, "{<prefix>:<i>}", and one slot; on
// a single server and behind Sentinel they keep their first names
// (<prefix>:worker:<i>, <prefix>:hwm:<i>), so that generators of earlier
// versions sharing the server see the same leases. A Cluster never
// worked with the first names (the renewal failed with CROSSSLOT), so no
// earlier generator holds a lease there.
func (g *IDGenerator) workerKey(i int) string {
	if g.tagged {
		return "{" + g.cfg.Prefix + ":" + strconv.Itoa(i) + "}:worker"
	}
	return g.cfg.Prefix + ":worker:" + strconv.Itoa(i)
}

func (g *IDGenerator) hwmKey(i int) string {
	if g.tagged {
		return "{" + g.cfg.Prefix + ":" + strconv.Itoa(i) + "}:hwm"
	}
	return g.cfg.Prefix + ":hwm:" + strconv.Itoa(i)
}

// acquire leases a free worker ID; it returns the highest millisecond a
// previous holder of that ID may have used, so the new holder starts above
// it even if its clock is behind.
func (g *IDGenerator) acquire(ctx context.Context) (int64, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	g.token = hex.EncodeToString(b[:])
	start := mrand.IntN(MaxWorkers)
	for k := 0; k < MaxWorkers; k++ {
		i := (start + k) % MaxWorkers
		t0 := time.Now()
		ok, err := g.cfg.Redis.SetNX(ctx, g.workerKey(i), g.token, g.cfg.LeaseTTL).Result()
		if err != nil {
			return 0, fmt.Errorf("sharding: lease a worker ID: %w", err)
		}
		if !ok {
			continue
		}
		g.worker = i
		g.extend(t0)
		hwm, err := g.cfg.Redis.Get(ctx, g.hwmKey(i)).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, fmt.Errorf("sharding: read the worker's high-water mark: %w", err)
		}
		return hwm, nil
	}
	return 0, ErrNoWorker
}

// extend records a successful lease (re)new issued at t0.
func (g *IDGenerator) extend(t0 time.Time) {
	g.validFor.Store(int64(t0.Sub(g.started) + g.cfg.LeaseTTL*9/10))
}

var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local old = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[3]) > old then redis.call('SET', KEYS[2], ARGV[3]) end
return 1`)

var releaseScript = redis.NewScript(`
local old = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) > old then redis.call('SET', KEYS[2], ARGV[2]) end
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

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
			g.cfg.Logger.Warn("freshread: ID generator lease renewal failed", "worker", g.worker, "err", err)
		}
	}
}

func (g *IDGenerator) renew() error {
	if g.lost.Load() {
		return ErrLeaseLost
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.LeaseTTL/3)
	defer cancel()
	t0 := time.Now()
	n, err := renewScript.Run(ctx, g.cfg.Redis, []string{g.workerKey(g.worker), g.hwmKey(g.worker)},
		g.token, g.cfg.LeaseTTL.Milliseconds(), g.highWater()).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		g.lost.Store(true)
		return ErrLeaseLost
	}
	g.extend(t0)
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

// Close stops renewing, records the high-water mark and releases the lease.
func (g *IDGenerator) Close() error {
	var err error
	g.closeOnce.Do(func() {
		close(g.stop)
		g.wg.Wait()
		g.lost.Store(true)
		if g.cfg.Redis != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = releaseScript.Run(ctx, g.cfg.Redis, []string{g.workerKey(g.worker), g.hwmKey(g.worker)}, g.token, g.highWater()).Err()
		}
	})
	return err
}

// Next mints an ID for route code route (0..2047; see Sharding.NewID,
// which derives it from a user ID).
func (g *IDGenerator) Next(route int) (int64, error) {
	if route < 0 || route > routeMask {
		return 0, fmt.Errorf("sharding: route code %d out of range", route)
	}
	st := &g.state[route]
	var waited time.Duration
	for {
		wall := g.cfg.Now()
		if g.lost.Load() || int64(time.Since(g.started)) > g.validFor.Load() {
			return 0, ErrLeaseLost
		}
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
				return composeID(ms, route, g.worker, int(sq)), nil
			}
		}
		if waited >= g.cfg.ClockWait {
			return 0, ErrClockBackwards
		}
		time.Sleep(time.Millisecond)
		waited += time.Millisecond
	}
}
