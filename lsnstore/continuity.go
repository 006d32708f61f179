package lsnstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Store discontinuities. A store that keeps positions on another server
// can lose what it was told: Redis restarted without persistence, FLUSHALL,
// a Sentinel or Cluster failover to a replica that had not received the
// last raises, eviction under maxmemory. A reader that trusted the store
// afterwards would take a missing position for "nothing written" and read
// stale. A Verifier lets its reader notice every such loss and be
// conservative about it before it trusts the store again.

// ErrDiscontinuity is returned (wrapped) by WritePosition of a verifying
// store when it may have lost positions since the reader last accepted it
// (Verifier); the reader must not trust the store until it has verified
// and accepted it again. IsDiscontinuity reports it.
var ErrDiscontinuity = errors.New("lsnstore: the store may have lost positions")

// IsDiscontinuity reports whether err is, or wraps, ErrDiscontinuity.
func IsDiscontinuity(err error) bool { return errors.Is(err, ErrDiscontinuity) }

// Epoch is what Verify found: an identity of the store's data (Token) and
// whether it differs from the one last accepted (Changed). The zero Epoch
// is never accepted.
type Epoch struct {
	// Token identifies the store's data: it changes whenever data may
	// have been lost.
	Token string
	// Changed: the store's data is not continuous with what the reader
	// last accepted (always true before the first Accept).
	Changed bool
	suspect uint64
}

// Verifier is a view of a store for one reader that verifies the store's
// continuity. The reader calls Verify periodically (the plugin: every
// poll); after a changed Epoch it makes its reads conservative for
// whatever the store may have lost (they wait for the primary's position
// read after Verify), and only then calls Accept. Until the first Accept,
// and whenever the store's data is no longer the accepted one,
// WritePosition returns ErrDiscontinuity, in its own round trip. When,
// since the accepted Verify began, the client replaced connections (a
// failover, a restart, or only a timeout) or a command failed on the
// network (a restart, a crash), WritePosition reads the server's identity
// in its own round trip too, and returns ErrDiscontinuity unless the
// server is the one the accepted Verify found.
type Verifier interface {
	Store
	Verify(ctx context.Context) (Epoch, error)
	Accept(e Epoch)
}

// LossyStore is implemented by stores that can lose data (Redis):
// NewReader returns a Verifier over the store. Each reader (each plugin)
// needs its own: what one reader accepted says nothing of what another has
// made conservative.
type LossyStore interface {
	Store
	NewReader() Verifier
}

var (
	_ LossyStore    = (*Redis)(nil)
	_ Verifier      = (*RedisReader)(nil)
	_ EvictionGuard = (*RedisReader)(nil)
)

// RedisReader is a Redis store seen by one reader that verifies its
// continuity (Verifier). Every other method is the store's.
type RedisReader struct {
	*Redis
	nsTag    uint32                 // the leases' namespace tag (LeaseTag)
	accepted atomic.Pointer[string] // the accepted token; nil: none yet
	// acceptedS is the client's suspect count (clientWatch) when the
	// accepted Verify started.
	acceptedS atomic.Uint64
	watch     *clientWatch
	// guardEvictions: reads check the server's eviction count
	// (EvictionGuard).
	guardEvictions atomic.Bool
	lease          leaseState // Leaser (lease.go)
	// carry: reads carry the shared poller's snapshot (SnapshotCarrier,
	// carry.go); carried: the last one a read carried.
	carry   atomic.Bool
	carried atomic.Pointer[carriedSnapshot]
}

// NewReader implements LossyStore. The first reader of a client installs
// a go-redis hook on it (clientWatch).
func (r *Redis) NewReader() Verifier {
	rr := &RedisReader{Redis: r}
	rr.lease.member = leaseMember()
	rr.lease.memberTag = leaseTagOf(rr.lease.member)
	rr.nsTag = leaseTagOf(r.base)
	rr.guardEvictions.Store(true)
	if r.err == nil {
		rr.watch = watchClient(r.rdb)
	}
	return rr
}

// WritePosition implements Store, checking the anchor in the same MGET.
func (rr *RedisReader) WritePosition(ctx context.Context, tables []string) (Position, error) {
	if rr.err != nil {
		return Position{}, rr.err
	}
	if rr.accepted.Load() == nil {
		return Position{}, fmt.Errorf("%w: not verified yet", ErrDiscontinuity)
	}
	return rr.writePosition(ctx, tables, rr)
}

// WritePositions implements BatchReader, checking the anchor like
// WritePosition in the same MGET.
func (rr *RedisReader) WritePositions(ctx context.Context, sets [][]string) ([]Position, error) {
	if rr.err != nil {
		return nil, rr.err
	}
	if rr.accepted.Load() == nil {
		return nil, fmt.Errorf("%w: not verified yet", ErrDiscontinuity)
	}
	return rr.writePositions(ctx, sets, rr)
}

// Invalidator is implemented by stores that several processes share
// (Redis). A process calls Invalidate when a write committed but may be
// missing from the store: its position could not be read after the
// commit (the primary went down just after COMMIT) or not be published.
// Every reader of the store then treats it as after a loss
// (ErrDiscontinuity until its next Verify, then the loss floor: the
// primary's position read after the Verify, past the write), so no
// process reads the write stale, whatever its own store says.
type Invalidator interface {
	Invalidate(ctx context.Context) error
}

var _ Invalidator = (*Redis)(nil)

// Invalidate implements Invalidator: it deletes the anchor, which every
// read's MGET checks and the next Verify replaces (Changed). One round
// trip.
func (r *Redis) Invalidate(ctx context.Context) error {
	if r.err != nil {
		return r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	if err := r.rdb.Del(ctx, r.anchorKey).Err(); err != nil {
		return fmt.Errorf("lsnstore: redis invalidate: %w", err)
	}
	return nil
}

// anchorScript returns the anchor, "<run_id>:<evicted_keys>:<random>",
// and the server's time in milliseconds. It replaces the anchor with a
// new one (ARGV[1] random) when it is missing (restart without
// persistence, FLUSHALL, eviction, a lease that lapsed: lease.go), when
// the server is another (failover, restart: a new run_id), when the
// server evicted keys since it was written, or when a lease in the
// leases set (KEYS[2]) has lapsed. Run where the anchor's slot lives, so
// it speaks of the server that holds the positions.
//
// Leases: ARGV[2] is the caller's member, ARGV[3] the milliseconds to
// renew it for ("0": no renewal), ARGV[4] the latest server time at which
// the renewal may still extend the member ("0": the call creates the
// member, which it alone names, and extends none). A renewal that arrives
// later (a call stuck in the network) is refused, so that a lease never
// outlives what its holder can bound (RedisReader.leaseCall), and a
// member once removed never comes back; an extension of a member the set
// does not hold answers -1, so that its holder creates another. The
// anchor then expires with the earliest lease. A member removed for
// having lapsed is recorded in the lapsed set (KEYS[3]) for ARGV[5]
// milliseconds (lapsedRetention), for the plugins' writer fence; one
// lost with the store's data is not.
var anchorScript = redis.NewScript(`
local a = redis.call('GET', KEYS[1])
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') or '?'
local ev = string.match(redis.call('INFO', 'stats'), 'evicted_keys:(%d+)') or '?'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lapsed = 0
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if first[2] and tonumber(first[2]) < now then
  local all = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  for i = 1, #all, 2 do
    if tonumber(all[i + 1]) >= now then break end
    redis.call('ZADD', KEYS[3], now, all[i])
  end
  lapsed = redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. now)
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. (now - tonumber(ARGV[5])))
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
end
local leases = lapsed > 0
local ttl = tonumber(ARGV[3])
local renewed = 0
if ttl > 0 then
  local held = redis.call('ZSCORE', KEYS[2], ARGV[2])
  local by = tonumber(ARGV[4])
  if (by == 0 and not held) or (by > 0 and held and now <= by) then
    redis.call('ZADD', KEYS[2], now + ttl, ARGV[2])
    leases, renewed = true, 1
  elseif by > 0 and not held then
    renewed = -1
  end
end
local keep = false
if a and lapsed == 0 then
  local r, e = string.match(a, '^([^:]*):([^:]*):')
  keep = r == run and e == ev
end
if not keep then
  a = run .. ':' .. ev .. ':' .. ARGV[1]
  redis.call('SET', KEYS[1], a)
  leases = true
end
if leases then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if first[2] then
    redis.call('PEXPIREAT', KEYS[1], first[2])
    local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
    redis.call('PEXPIREAT', KEYS[2], last[2])
  else
    redis.call('PERSIST', KEYS[1])
  end
end
return {a, tostring(now), renewed}
`)

// Verify implements Verifier with one script call, which also renews
// this reader's lease when it is due (Leaser).
func (rr *RedisReader) Verify(ctx context.Context) (Epoch, error) {
	return rr.verify(ctx, false)
}

// verify is Verify, renewing the lease when it is due or when renew.
func (rr *RedisReader) verify(ctx context.Context, renew bool) (Epoch, error) {
	r := rr.Redis
	if r.err != nil {
		return Epoch{}, r.err
	}
	if err := rr.verifyFormat(ctx); err != nil {
		return Epoch{}, err
	}
	suspect := rr.watch.suspect.Load()
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	lease := rr.leaseCall(renew, r.maxTimeout)
	v, err := anchorScript.Run(ctx, r.rdb, []string{r.anchorKey, r.leasesKey(), r.lapsedKey()},
		hex.EncodeToString(nonce[:]), lease.member, lease.ms, lease.by, lapsedRetention.Milliseconds()).Slice()
	if err != nil {
		rr.leaseFailed(lease)
		return Epoch{}, fmt.Errorf("lsnstore: redis verify: %w", err)
	}
	r.alive.Answered()
	tok, now, renewed, err := anchorReply(v)
	if err != nil {
		rr.leaseFailed(lease)
		return Epoch{}, err
	}
	rr.leaseAnswered(lease, now, renewed)
	acc := rr.accepted.Load()
	return Epoch{Token: tok, Changed: acc == nil || *acc != tok, suspect: suspect}, nil
}

// anchorReply reads anchorScript's reply; renewed is 1 (renewed), 0 (not
// asked, not due, or refused as late) or -1 (the member to extend is gone).
func anchorReply(v []any) (tok string, now int64, renewed int64, err error) {
	if len(v) == 3 {
		tok, _ = v[0].(string)
		ns, _ := v[1].(string)
		n, _ := v[2].(int64)
		if now, err = strconv.ParseInt(ns, 10, 64); err == nil && tok != "" {
			return tok, now, n, nil
		}
	}
	return "", 0, 0, fmt.Errorf("lsnstore: redis verify: unexpected reply %v", v)
}

// Accept implements Verifier.
func (rr *RedisReader) Accept(e Epoch) {
	if e.Token == "" {
		return
	}
	rr.acceptedS.Store(e.suspect)
	rr.accepted.Store(&e.Token)
}

// suspect reports whether the client replaced connections or failed on
// the network since the accepted Verify began: a read must then check
// the server's identity in its own round trip (guardedMget).
func (rr *RedisReader) suspect() bool {
	return rr.watch.suspect.Load() != rr.acceptedS.Load()
}

// guardedMget runs args ("mget", anchor, keys...) in guardedRead, asking
// for the server's run_id when identify, and checks the anchor with what
// the server said of itself.
func (rr *RedisReader) guardedMget(ctx context.Context, args []any, identify bool) ([]any, []any, error) {
	keys := make([]string, len(args)-1)
	for i, a := range args[1:] {
		keys[i] = a.(string)
	}
	var argv []any
	extra := 1
	if identify {
		argv, extra = identifyArgv, 2
	}
	v, err := guardedRead.Run(ctx, rr.rdb, keys, argv...).Slice()
	if err != nil {
		return nil, nil, fmt.Errorf("lsnstore: redis MGET (guarded script): %w", err)
	}
	rr.alive.Answered()
	if len(v) != len(keys)+extra {
		return nil, nil, fmt.Errorf("%w: a reply of %d values to %d keys", ErrDiscontinuity, len(v), len(keys))
	}
	ev, _ := v[len(keys)].(string)
	var runID string
	if identify {
		if runID, _ = v[len(keys)+1].(string); runID == "" {
			runID = "?"
		}
	}
	if err := rr.checkAnchor(v[0], ev, runID); err != nil {
		return nil, nil, err
	}
	return v[1:len(keys)], args[1:], nil
}

var identifyArgv = []any{"id"}

// checkAnchor is WritePosition's check of the anchor value it read (nil:
// missing), of the server's eviction count read with it (evicted; ""
// when not read) and of the server's run_id read with it (runID; "" when
// not read).
//
// While the client's connections are suspect (suspect: a connection
// replaced, a command failed on the network), the read may have reached
// another server than the one verified (a failover, a restart from a
// snapshot that holds the accepted anchor but not the last raises): it is
// trusted only when it read the server's run_id and that is the anchor's,
// the run_id of the server that the accepted Verify found holding it. A
// read that did not (the connection was replaced during it) refuses.
func (rr *RedisReader) checkAnchor(v any, evicted, runID string) error {
	acc := rr.accepted.Load()
	if acc == nil {
		return fmt.Errorf("%w: not verified yet", ErrDiscontinuity)
	}
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("%w: its anchor key is gone (restarted empty, flushed, evicted, or a process sharing it stopped renewing its lease)", ErrDiscontinuity)
	}
	if s != *acc {
		return fmt.Errorf("%w: its anchor changed (failover, restart or eviction)", ErrDiscontinuity)
	}
	run, rest, _ := strings.Cut(s, ":")
	if runID != "" {
		if runID != run {
			return fmt.Errorf("%w: another server answers than the one verified (failover or restart)", ErrDiscontinuity)
		}
	} else if rr.suspect() {
		return fmt.Errorf("%w: replaced connections or failed on the network since the last verification", ErrDiscontinuity)
	}
	if evicted != "" {
		// The anchor is "<run_id>:<evicted_keys>:<random>".
		if !strings.HasPrefix(rest, evicted+":") {
			return fmt.Errorf("%w: the server evicted keys since the last verification", ErrDiscontinuity)
		}
	}
	return nil
}

// GuardEvictions implements EvictionGuard.
func (rr *RedisReader) GuardEvictions(on bool) { rr.guardEvictions.Store(on) }

// EvictionGuard is implemented by readers whose store may evict
// positions (Redis under maxmemory with an evicting policy). Evictions
// are a discontinuity that the periodic Verify notices; with the guard
// on, every read also notices one in its own round trip, so no read
// between an eviction and the next Verify trusts the store. The guard
// costs the server more per read (Redis: the read's MGET runs in a script
// that also reads INFO stats, about 19 µs of server time instead of
// 0.5 µs). A new reader guards until told otherwise.
type EvictionGuard interface {
	GuardEvictions(on bool)
}

// clientWatch counts, for one go-redis client, the events after which
// the server may be another or may have lost data: a connection opened to
// replace dead ones (a server restarted, with or without persistence, or
// failed over to: every pooled connection died, go-redis removed them,
// and the next command dials), and a command failing on the network (a
// restart, a crash before a failover; at the latest the reader's periodic
// Verify fails so). One hook per client, shared by every store on it.
type clientWatch struct {
	suspect atomic.Uint64
}

var clientWatches sync.Map // redis.UniversalClient -> *clientWatch

// watchClient returns the client's watch, installing its hook the first
// time (on a Cluster client, on every node's client too).
func watchClient(rdb redis.UniversalClient) *clientWatch {
	if w, ok := clientWatches.Load(rdb); ok {
		return w.(*clientWatch)
	}
	w := &clientWatch{}
	if v, loaded := clientWatches.LoadOrStore(rdb, w); loaded {
		return v.(*clientWatch)
	}
	var reload func()
	if c, ok := rdb.(*redis.ClusterClient); ok {
		// After a master crashes, nothing redirects the client (the dead
		// master sends no MOVED), and go-redis rereads the slot map only
		// every ClusterStateReloadInterval (default 60 s): until then every
		// command for the master's slots fails and reads stay on the
		// primary. A broken connection asks for a reload at once (go-redis
		// runs one at a time, 200 ms apart).
		reload = func() { c.ReloadState(context.Background()) }
		c.OnNewNode(func(n *redis.Client) { n.AddHook(&suspectHook{w: w, pool: n.PoolStats, reload: reload}) })
	}
	rdb.AddHook(&suspectHook{w: w, pool: rdb.PoolStats, reload: reload})
	return w
}

type suspectHook struct {
	w    *clientWatch
	pool func() *redis.PoolStats
	// stale is the pool's count of removed connections at the last dial.
	stale atomic.Uint32
	// reload rereads a Cluster client's slot map; nil for other clients.
	reload func()
}

// DialHook counts a new connection made when the pool was empty or had
// removed connections since the previous dial: after a restart (which
// keeps the address and, with persistence, the anchor) or a failover (a
// go-redis FailoverClient dials the new master under one placeholder
// address), every pooled connection is dead and removed before the next
// command dials. The pool growing under load counts nothing; an idle or
// timed-out connection replaced does (until the next Verify, which finds
// the anchor unchanged, reads check the server's run_id in their own
// round trip and stay on replicas: checkAnchor).
func (h *suspectHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		st := h.pool()
		c, err := next(ctx, network, addr)
		if err == nil && (h.stale.Swap(st.StaleConns) != st.StaleConns || st.TotalConns == 0) {
			h.w.suspect.Add(1)
		}
		return c, err
	}
}

func (h *suspectHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(err)
		return err
	}
}

func (h *suspectHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(err)
		return err
	}
}

// check counts a connection that broke or was refused: the server may
// have restarted or been replaced. The server's answers (a Redis error
// reply, a missing key) count nothing, and neither do timeouts and
// cancellations, which a loaded server or an impatient caller cause (a
// server that is really gone also refuses or resets connections, and a
// failover shows as a new address).
func (h *suspectHook) check(err error) {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	var re redis.Error
	if errors.As(err, &re) {
		return
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return
	}
	h.w.suspect.Add(1)
	if h.reload != nil {
		h.reload()
	}
}

// EvictionChecker is implemented by stores whose server may evict keys
// under memory pressure (Redis).
type EvictionChecker interface {
	// EvictionPolicy returns the server's eviction policy and whether it
	// may evict position keys (a maxmemory limit with any policy but
	// noeviction: position keys carry a TTL, the first candidates of the
	// volatile-* policies). An error when the server refuses CONFIG GET
	// (some managed services).
	EvictionPolicy(ctx context.Context) (policy string, mayEvict bool, err error)
}

var _ EvictionChecker = (*Redis)(nil)

// EvictionPolicy implements EvictionChecker with CONFIG GET (on a Redis
// Cluster, of the node the client picks).
func (r *Redis) EvictionPolicy(ctx context.Context) (string, bool, error) {
	if r.err != nil {
		return "", false, r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	m, err := r.rdb.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		return "", false, fmt.Errorf("lsnstore: redis CONFIG GET maxmemory*: %w", err)
	}
	policy := m["maxmemory-policy"]
	return policy, m["maxmemory"] != "0" && m["maxmemory"] != "" && policy != "noeviction", nil
}
