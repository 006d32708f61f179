package lsnstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/internal/lib/roundtrip"
)

// Redis is a Store kept in Redis, shared by every process that reads or
// writes the database. Every key of one database shares one hash tag, so
// the store also works on Redis Cluster. See the package documentation for
// the key layout.
type Redis struct {
	rdb     redis.UniversalClient
	hook    *watchHook    // the client's watch (WatchRedis); nil without a client
	opts    RedisOptions  // after defaults
	err     error         // from NewRedis: every call returns it
	timeout time.Duration // the floor of the per-call timeout
	// maxTimeout is the ceiling of the per-call timeout, and Verify's.
	maxTimeout time.Duration
	rtt        roundTrips
	alive      roundtrip.Answers // when the server last answered (Liveness)
	ttl        string            // TTL in milliseconds, as a script argument
	// signatureValid is how long a ClaimSignature answer holds: a
	// quarter of the TTL the signature is refreshed with.
	signatureValid time.Duration
	keyTTL         string // KeyTTL in milliseconds

	base        string // prefix + "{" + database + "}-"
	maxKey      string
	maxKeyArg   any // maxKey, boxed once
	unknownKey  string
	unknownArg  any
	minKey      string
	replicasKey string

	tableKeys sync.Map // table name -> key (a string in an any)

	// anchorKey is the key whose value identifies the store's data
	// (continuity.go).
	anchorKey string
	anchorArg any
	pollArg   any // pollKey, for the snapshot a read carries

	format formatState // the store format's last check (format.go)
}

// NewRedis returns a store over rdb, a *redis.Client, *redis.ClusterClient
// or any other go-redis v9 UniversalClient. It does not contact the
// server. Invalid options (see RedisOptions.Validate) or a nil rdb make
// every call of the store return the error.
func NewRedis(rdb redis.UniversalClient, opts RedisOptions) *Redis {
	r := &Redis{rdb: rdb, err: opts.Validate()}
	if rdb == nil {
		r.err = errors.Join(r.err, errors.New("lsnstore: NewRedis: nil redis client"))
	}
	r.err = errors.Join(r.err, refuseClientCache(rdb))
	r.hook = watchRedis(rdb) // refusals (NOPERM) logged and counted; failures name their cause
	o := opts.withDefaults()
	r.opts = o
	r.timeout, r.maxTimeout = o.Timeout, o.MaxTimeout
	r.ttl = strconv.FormatInt(o.TTL.Milliseconds(), 10)
	r.signatureValid = o.TTL / 4
	r.keyTTL = strconv.FormatInt(o.KeyTTL.Milliseconds(), 10)
	r.base = o.Prefix + "{" + o.Database + "}-"
	r.maxKey = r.base + "write_lsn"
	r.maxKeyArg = r.maxKey
	r.unknownKey = r.base + "write_lsn-unknown_tables"
	r.unknownArg = r.unknownKey
	r.minKey = r.base + "replay_lsn"
	r.replicasKey = r.base + "replicas"
	r.anchorKey = r.base + "anchor"
	r.anchorArg = r.anchorKey
	r.pollArg = r.pollKey()
	return r
}

// refuseClientCache returns an error for a client with go-redis's
// client-side cache: its invalidations arrive after the writer's raise
// returns, so a process would read another's raise stale for milliseconds
// (93.7 % of raises read at once by another process, docs/measurements/benchmarks.md,
// "Client-side caching"), and for as long as a silent partition lasts.
func refuseClientCache(rdb redis.UniversalClient) error {
	c, ok := rdb.(*redis.Client)
	if !ok {
		return nil
	}
	if o := c.Options(); o.ClientSideCache != nil || o.ClientSideCacheConfig != nil {
		return errors.New("lsnstore: NewRedis: the client caches reads on the client side (redis.Options.ClientSideCache or ClientSideCacheConfig), which would serve positions older than another process's raise; give the store a client without it")
	}
	return nil
}

// tableKey returns the key of table's write position, boxed, from a cache
// that does not lock or allocate on a hit. Key positions (KeyName) are
// not cached: there is no end to them.
func (r *Redis) tableKey(table string) any {
	if isKeyName(table) {
		return r.base + table + "-write_lsn"
	}
	if k, ok := r.tableKeys.Load(table); ok {
		return k
	}
	k, _ := r.tableKeys.LoadOrStore(table, r.base+table+"-write_lsn")
	return k
}

func (r *Redis) replicaKey(replica string) string { return r.base + "replay_lsn-" + replica }

// mgetArgs recycles the argument slices of WritePosition's MGET (one
// allocation less per read). A slice is put back once the command and its
// reply are done with it.
var mgetArgs = sync.Pool{New: func() any { s := make([]any, 0, 8); return &s }}

func putMgetArgs(buf *[]any) {
	if cap(*buf) > 256 {
		return // an unusually wide read: let it go
	}
	clear((*buf)[:cap(*buf)])
	*buf = (*buf)[:0]
	mgetArgs.Put(buf)
}

// withReadTimeout bounds a read's lookup by the per-call timeout, which
// follows the store's measured round trips between Timeout and MaxTimeout
// (roundTrips), unless ctx ends sooner (then ctx is used as it is, and
// call is nil). The caller releases call when the call and its reply are
// done (nil-safe).
func (r *Redis) withReadTimeout(ctx context.Context) (_ context.Context, call *callCtx) {
	if r.timeout < 0 {
		return ctx, nil
	}
	return r.withTimeoutOf(ctx, r.rtt.timeout(r.timeout, r.maxTimeout))
}

// withTimeout is withReadTimeout for every other call (raises,
// invalidations, verifications, signatures, the tracker's): MaxTimeout.
// None holds a read, and each that fails makes reads conservative (a
// raise or an invalidation that fails sends every reader to the primary
// until the next poll), so a slow store is given the longest time.
func (r *Redis) withTimeout(ctx context.Context) (_ context.Context, call *callCtx) {
	if r.timeout < 0 {
		return ctx, nil
	}
	return r.withTimeoutOf(ctx, r.maxTimeout)
}

// withTimeoutOf is withTimeout with timeout d.
func (r *Redis) withTimeoutOf(ctx context.Context, d time.Duration) (_ context.Context, call *callCtx) {
	if d < 0 || ctx.Err() != nil {
		return ctx, nil
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return ctx, nil
	}
	c := newCallCtx(ctx, d, &r.rtt)
	return c, c
}

// WritePosition implements Store with one MGET.
func (r *Redis) WritePosition(ctx context.Context, tables []string) (Position, error) {
	if r.err != nil {
		return Position{}, r.err
	}
	return r.writePosition(ctx, tables, nil)
}

// guardedRead is MGET in a script that also returns the server's
// evicted_keys (after the values) and, with ARGV[1] "id", its run_id
// (last): a RedisReader compares them with the accepted anchor's in the
// same round trip, when it guards evictions or when its client's
// connections are suspect (checkAnchor).
var guardedRead = redis.NewScript(`
local v = redis.call('MGET', unpack(KEYS))
v[#KEYS + 1] = string.match(redis.call('INFO', 'stats'), 'evicted_keys:(%d+)') or '?'
if ARGV[1] == 'id' then
  v[#KEYS + 2] = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') or '?'
end
return v
`)

// writePosition reads the positions with one MGET; for a RedisReader
// (rr) the anchor is read first in the same MGET and checked, and when rr
// guards evictions the MGET runs in a script that also returns the
// server's eviction count (guardedRead).
func (r *Redis) writePosition(ctx context.Context, tables []string, rr *RedisReader) (Position, error) {
	buf := mgetArgs.Get().(*[]any)
	defer putMgetArgs(buf)
	args := append((*buf)[:0], "mget")
	if rr != nil {
		args = append(args, r.anchorArg)
	}
	if tables == nil {
		args = append(args, r.maxKeyArg)
	} else {
		args = append(args, r.unknownArg)
		for _, t := range tables {
			args = append(args, r.tableKey(t))
		}
	}
	*buf = args // a grown slice is kept for the next call
	vals, args, err := r.mget(ctx, args, rr, false)
	if err != nil {
		return Position{}, err
	}
	var pos Position
	for i, v := range vals {
		p, err := positionValue(v, args[i+1])
		if err != nil {
			return Position{}, err
		}
		pos = pos.Merge(p)
	}
	return pos, nil
}

// positionValue parses an MGET value of key: a missing key is the zero
// position (no recent write).
func positionValue(v, key any) (Position, error) {
	s, ok := v.(string)
	if !ok {
		return Position{}, nil
	}
	p, ok := parsePosition(s)
	if !ok {
		return Position{}, fmt.Errorf("%w %q at key %v", ErrBadPosition, truncate(s), key)
	}
	return p, nil
}

// mget runs args ("mget", [anchor], keys...) and returns the values of the
// keys, with args without the anchor: for a RedisReader (rr) the anchor
// comes first and is checked, in a script with the server's eviction
// count when rr guards evictions and its identity while rr's connections
// are suspect (guardedMget).
//
// When rr carries the shared poller's snapshot (CarrySnapshot), the
// snapshot's key is read last in the same MGET and kept for
// CarriedSnapshot.
func (r *Redis) mget(ctx context.Context, args []any, rr *RedisReader, batched bool) ([]any, []any, error) {
	carry := rr != nil && rr.carry.Load()
	if carry {
		args = append(args, r.pollArg)
	}
	vals, args, err := r.mgetKeys(ctx, args, rr, batched)
	if err != nil || !carry {
		return vals, args, err
	}
	n := len(vals)
	if n == 0 || len(args) != n+1 {
		return nil, nil, fmt.Errorf("%w: a reply of %d values to %d keys", ErrDiscontinuity, n, len(args)-1)
	}
	rr.keepCarried(vals[n-1])
	return vals[:n-1], args[:n], nil
}

// mgetKeys is mget without the carried snapshot.
func (r *Redis) mgetKeys(ctx context.Context, args []any, rr *RedisReader, batched bool) ([]any, []any, error) {
	var call *callCtx
	if batched {
		// A batch's readers wait ReadBound each and longer only while the
		// store answers (Liveness): the call itself may take the longest.
		ctx, call = r.withTimeout(ctx)
	} else {
		ctx, call = r.withReadTimeout(ctx)
	}
	defer call.release()
	var vals []any
	if rr != nil {
		if identify := rr.suspect(); identify || rr.guardEvictions.Load() {
			return rr.guardedMget(ctx, args, identify)
		}
	}
	cmd := redis.NewSliceCmd(ctx, args...)
	if err := r.rdb.Process(ctx, cmd); err != nil {
		return nil, nil, fmt.Errorf("lsnstore: redis MGET: %w", err)
	}
	r.alive.Answered()
	vals = cmd.Val()
	if rr != nil {
		if len(vals) == 0 {
			return nil, nil, fmt.Errorf("%w: empty MGET reply", ErrDiscontinuity)
		}
		if err := rr.checkAnchor(vals[0], "", ""); err != nil {
			return nil, nil, err
		}
		return vals[1:], args[1:], nil
	}
	return vals, args, nil
}

// WritePositions implements BatchReader with one MGET of the union of the
// sets' keys.
func (r *Redis) WritePositions(ctx context.Context, sets [][]string) ([]Position, error) {
	if r.err != nil {
		return nil, r.err
	}
	return r.writePositions(ctx, sets, nil)
}

func (r *Redis) writePositions(ctx context.Context, sets [][]string, rr *RedisReader) ([]Position, error) {
	args := []any{"mget"}
	if rr != nil {
		args = append(args, r.anchorArg)
	}
	first := len(args)
	index := make(map[any]int, 8) // key -> index among the keys
	add := func(k any) int {
		if i, ok := index[k]; ok {
			return i
		}
		i := len(args) - first
		index[k] = i
		args = append(args, k)
		return i
	}
	refs := make([][]int, len(sets))
	for s, tables := range sets {
		if tables == nil {
			refs[s] = []int{add(r.maxKeyArg)}
			continue
		}
		ref := make([]int, 0, len(tables)+1)
		ref = append(ref, add(r.unknownArg))
		for _, t := range tables {
			ref = append(ref, add(r.tableKey(t)))
		}
		refs[s] = ref
	}
	vals, args, err := r.mget(ctx, args, rr, true)
	if err != nil {
		return nil, err
	}
	parsed := make([]Position, len(vals))
	for i, v := range vals {
		if parsed[i], err = positionValue(v, args[i+1]); err != nil {
			return nil, err
		}
	}
	out := make([]Position, len(sets))
	for s, ref := range refs {
		for _, i := range ref {
			out[s] = out[s].Merge(parsed[i])
		}
	}
	return out, nil
}

// Raise implements Store with one script call (EVALSHA, or EVAL the first
// time a server sees the script).
func (r *Redis) Raise(ctx context.Context, tables []string, pos Position) error {
	if r.err != nil {
		return r.err
	}
	_, err := r.raise(ctx, tables, pos, nil)
	return err
}

// raise is Raise, and RaiseChecked when c is not nil (schema.go).
func (r *Redis) raise(ctx context.Context, tables []string, pos Position, c *SchemaCheck) (SchemaVerdict, error) {
	if pos.IsZero() {
		return SchemaVerdict{}, nil
	}
	var signed []string // SignedKeyedTable names, checked last by the script
	for _, t := range tables {
		if _, _, ok := signedTarget(t); ok {
			signed = append(signed, t)
		}
	}
	tables = raiseNames(tables)
	keys := make([]string, 0, len(tables)+5+2*len(signed))
	if tables == nil {
		keys = append(keys, r.unknownKey)
	}
	// Key positions last: they take KeyTTL from the first of them on.
	nkeys := 0
	for _, t := range tables {
		if isKeyName(t) {
			nkeys++
			continue
		}
		keys = append(keys, r.tableKey(t).(string))
	}
	keys = append(keys, r.maxKey)
	first := len(keys) + 1
	if nkeys > 0 {
		for _, t := range tables {
			if isKeyName(t) {
				keys = append(keys, r.tableKey(t).(string))
			}
		}
	}
	args := []any{pos.String(), r.ttl, r.keyTTL, first, len(signed)}
	for _, n := range signed {
		t, sig, _ := signedTarget(n)
		keys = append(keys, r.tableKey(SignatureName(t)).(string), r.tableKey(UnkeyedName(t)).(string))
		args = append(args, sig)
	}
	if c != nil {
		keys = append(keys, r.schemaKey(), r.pendingKey(), r.unknownKey)
		check, changed := "0", "0"
		if c.Check {
			check = "1"
		}
		switch {
		case c.Changed && c.Before:
			changed = "2"
		case c.Changed:
			changed = "1"
		}
		epoch := "" // for a store without a generation, drawn only when one may be made
		if c.Changed {
			epoch = newMark()
		}
		args = append(args, check, c.Graph, changed, epoch)
		for _, k := range c.Done {
			args = append(args, k)
		}
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	res, err := raiseScript.Run(ctx, r.rdb, keys, args...).Result()
	if err != nil {
		return SchemaVerdict{}, fmt.Errorf("lsnstore: redis raise: %w", err)
	}
	r.alive.Answered()
	if c == nil {
		return SchemaVerdict{}, nil
	}
	// {other, flag}: flag 1 stale, 2 pending, 3 both.
	if v, ok := res.([]any); ok && len(v) == 2 {
		if f, ok := v[1].(int64); ok {
			return SchemaVerdict{Stale: f&1 != 0, Pending: f&2 != 0}, nil
		}
	}
	return SchemaVerdict{}, fmt.Errorf("lsnstore: redis raise: unexpected reply %v", res)
}

// PublishReplay implements Store with one script call.
// signatureScript is ClaimSignature: KEYS[1] the signature's key, ARGV[1]
// the signature claimed, ARGV[2] the TTL (ms) it is recorded or refreshed
// with when it is the table's.
var signatureScript = redis.NewScript(`
local cur = redis.call("GET", KEYS[1])
if cur and cur ~= ARGV[1] then return cur end
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
return ARGV[1]
`)

// ClaimSignature implements KeySignatures with one script call. A
// signature lives for the store's TTL after the last claim or keyed raise
// that matched it (so the columns of a service that changed its
// KeyColumns take over once no process of the old configuration has used
// the old ones for that long), and a claimer may trust the answer for a
// quarter of it.
func (r *Redis) ClaimSignature(ctx context.Context, table, sig string) (string, time.Duration, error) {
	if r.err != nil {
		return "", 0, r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	cur, err := signatureScript.Run(ctx, r.rdb, []string{r.tableKey(SignatureName(table)).(string)}, sig, r.ttl).Text()
	if err != nil {
		return "", 0, fmt.Errorf("lsnstore: redis claim key signature: %w", err)
	}
	return cur, r.signatureValid, nil
}

func (r *Redis) PublishReplay(ctx context.Context, replicas map[string]Position) error {
	if r.err != nil {
		return r.err
	}
	if len(replicas) == 0 {
		return nil
	}
	keys := make([]string, 2, len(replicas)+2)
	keys[0], keys[1] = r.minKey, r.replicasKey
	args := make([]any, 1, 2*len(replicas)+1)
	args[0] = r.ttl
	for name, pos := range replicas {
		keys = append(keys, r.replicaKey(name))
		args = append(args, name, pos.String())
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	if err := publishScript.Run(ctx, r.rdb, keys, args...).Err(); err != nil {
		return fmt.Errorf("lsnstore: redis publish replay: %w", err)
	}
	return nil
}

// ReplayPositions implements Store with one HGETALL.
func (r *Redis) ReplayPositions(ctx context.Context) (map[string]Position, error) {
	if r.err != nil {
		return nil, r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	m, err := r.rdb.HGetAll(ctx, r.replicasKey).Result()
	if err != nil {
		return nil, fmt.Errorf("lsnstore: redis HGETALL: %w", err)
	}
	out := make(map[string]Position, len(m))
	for name, s := range m {
		l, ok := parsePosition(s)
		if !ok {
			return nil, fmt.Errorf("%w %q for replica %q at key %s", ErrBadPosition, truncate(s), name, r.replicasKey)
		}
		out[name] = l
	}
	return out, nil
}

// ReplayPosition returns the minimum replay position (per lane) published
// by the latest PublishReplay call (the <db>-replay_lsn key), the zero
// position when none or expired. It is not part of Store.
func (r *Redis) ReplayPosition(ctx context.Context) (Position, error) {
	return r.getPosition(ctx, r.minKey)
}

// getPosition reads the position at key with one GET: the zero position
// when key is missing.
func (r *Redis) getPosition(ctx context.Context, key string) (Position, error) {
	if r.err != nil {
		return Position{}, r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	s, err := r.rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return Position{}, nil
	}
	if err != nil {
		return Position{}, fmt.Errorf("lsnstore: redis GET: %w", err)
	}
	l, ok := parsePosition(s)
	if !ok {
		return Position{}, fmt.Errorf("%w %q at key %s", ErrBadPosition, truncate(s), key)
	}
	return l, nil
}
