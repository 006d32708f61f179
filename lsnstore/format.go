package lsnstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread"
)

// Store format. The data a Redis store keeps (the key layout of the
// package documentation, the text of positions, key signatures, the
// anchor, the leases) has a format, numbered by FormatVersion. A release
// that changes what any process sharing the store reads or writes so
// that an older process would read stale beside it raises FormatVersion;
// one that only adds what older processes ignore does not.
//
// The store records, in a sorted set P{D}-format, one member per format
// and release in use, "<format>:<oldest>:<release>" ("1:1:0.2.0"), scored
// with the server time (ms) until which it is in use: the store's TTL
// (the longer of TTL and KeyTTL) after the last check of a process of
// that release, for as long as data written in it may live. A process
// checks at db.Use (CheckFormat) and again every quarter of that TTL (in
// its Verify), in one script that drops the members whose time has
// passed, refuses when a member is a format the process cannot run
// beside, and records the process's member otherwise.
//
// Two formats f < g run beside each other when the newer knows it: when
// g's oldest format is at most f. So a release decides, for itself, which
// older formats it runs beside, and an older process learns it from the
// newer one's member. The member's syntax "<format>:<oldest>:" never
// changes; a member that does not parse is refused.

const (
	// FormatVersion is the format of the data this build keeps in a
	// Redis store.
	FormatVersion = 1
	// OldestCompatibleFormat is the oldest format that processes of this
	// build run beside on one store (a rolling upgrade from it, or a
	// rollback to it): its processes and this build's read each other's
	// data without a stale read.
	OldestCompatibleFormat = 1
)

// ErrStoreFormat is returned (wrapped, as a *FormatError) when a store
// holds data of a format the process cannot run beside.
var ErrStoreFormat = errors.New("lsnstore: the store holds data of a format this process cannot run beside")

// FormatError says which format a store holds that the process cannot
// run beside. It wraps ErrStoreFormat.
type FormatError struct {
	// Key is the store's format key.
	Key string
	// Found is the format found in the store, FoundOldest the oldest
	// format that its release runs beside, FoundRelease that release
	// (Version of package freshread), as the store recorded them. Found
	// is -1 when the store's member did not parse (Member holds it).
	Found, FoundOldest int
	// FoundRelease is the release that recorded Found.
	FoundRelease string
	// Member is the store's record as it was read.
	Member string
	// Format, Oldest and Release are this process's (FormatVersion,
	// OldestCompatibleFormat, freshread.Version()).
	Format, Oldest int
	// Release is this process's release.
	Release string
	// Until is when the found format's record lapses unless a process of
	// its release checks again (the store's clock).
	Until time.Time
}

func (e *FormatError) Error() string {
	me := fmt.Sprintf("freshread %s (format %d)", e.Release, e.Format)
	if e.Found < 0 {
		return fmt.Sprintf("lsnstore: the store's format key %s holds %q, which freshread %s (format %d) cannot read: it was written by a newer release; upgrade this process to that release",
			e.Key, e.Member, e.Release, e.Format)
	}
	them := fmt.Sprintf("freshread %s (format %d)", e.FoundRelease, e.Found)
	lapse := fmt.Sprintf("then wait until its record lapses (%s, the store's TTL after a process of it last checked) or delete the store's keys (%s*), which every process takes for a store that lost its data",
		e.Until.UTC().Format(time.RFC3339), strings.TrimSuffix(e.Key, "format"))
	var remedy string
	if e.Found > e.Format {
		remedy = fmt.Sprintf("finish the upgrade: run %s or a later release here too; to go back to %s instead, stop every process of %s, %s",
			e.FoundRelease, e.Release, e.FoundRelease, lapse)
	} else {
		remedy = fmt.Sprintf("stop every process of %s (and of any release of format %d) before starting this one, %s",
			e.FoundRelease, e.Found, lapse)
	}
	return fmt.Sprintf("lsnstore: the position store is in use by %s, which %s cannot run beside (key %s): %s", them, me, e.Key, remedy)
}

// Unwrap makes errors.Is(err, ErrStoreFormat) hold.
func (e *FormatError) Unwrap() error { return ErrStoreFormat }

// FormatChecker is implemented by stores that several processes share
// and that record their format (Redis).
type FormatChecker interface {
	// CheckFormat records this process's format in the store, or returns
	// a *FormatError (wrapping ErrStoreFormat) when the store holds a
	// format this process cannot run beside. One round trip. Any other
	// error means the store could not be asked.
	CheckFormat(ctx context.Context) error
}

var _ FormatChecker = (*Redis)(nil)

// formatSpec is what a process records of itself in the format key.
type formatSpec struct {
	format, oldest int
	release        string
}

// thisBuild is this build's formatSpec.
var thisBuild = formatSpec{format: FormatVersion, oldest: OldestCompatibleFormat, release: freshread.Version()}

// member is the spec's member of the format key.
func (s formatSpec) member() string {
	return strconv.Itoa(s.format) + ":" + strconv.Itoa(s.oldest) + ":" + s.release
}

// parseFormatMember parses a member of the format key; ok is false when
// it does not parse.
func parseFormatMember(m string) (s formatSpec, ok bool) {
	f, rest, ok1 := strings.Cut(m, ":")
	o, rel, ok2 := strings.Cut(rest, ":")
	fv, err1 := strconv.Atoi(f)
	ov, err2 := strconv.Atoi(o)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || fv < 0 || ov < 0 {
		return formatSpec{}, false
	}
	return formatSpec{format: fv, oldest: ov, release: rel}, true
}

// formatScript drops the lapsed members of the format key (KEYS[1]),
// returns {"no", member, until} for the first member that ARGV[1] (the
// caller's format) and ARGV[2] (its oldest) cannot run beside (runsBeside),
// and otherwise records ARGV[3] (the caller's member) until now + ARGV[4]
// ms (never lowering it), keeps the key as long as its latest member, and
// returns {"ok"}.
var formatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
local f, o = tonumber(ARGV[1]), tonumber(ARGV[2])
local held = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #held, 2 do
  local g, h = string.match(held[i], '^(%d+):(%d+):')
  local ok = false
  if g then
    g, h = tonumber(g), tonumber(h)
    if g <= f then ok = o <= g else ok = h <= f end
  end
  if not ok then return {'no', held[i], held[i + 1]} end
end
local untl = now + tonumber(ARGV[4])
local cur = redis.call('ZSCORE', KEYS[1], ARGV[3])
if not cur or tonumber(cur) < untl then
  redis.call('ZADD', KEYS[1], untl, ARGV[3])
end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return {'ok'}
`)

// formatState is a Redis store's record of its format check.
type formatState struct {
	// due is when the record must be renewed (Unix nanoseconds on this
	// process's clock); 0: never checked.
	due atomic.Int64
}

// formatTTL is how long a process's member stays in the format key after
// a check: as long as data it wrote may live.
func (r *Redis) formatTTL() time.Duration { return max(r.opts.TTL, r.opts.KeyTTL) }

func (r *Redis) formatKey() string { return r.base + "format" }

// CheckFormat implements FormatChecker.
func (r *Redis) CheckFormat(ctx context.Context) error {
	return r.checkFormat(ctx, thisBuild)
}

// checkFormat is CheckFormat for a process of spec (tests speak for other
// releases through it).
func (r *Redis) checkFormat(ctx context.Context, spec formatSpec) error {
	if r.err != nil {
		return r.err
	}
	ttl := r.formatTTL()
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	key := r.formatKey()
	v, err := formatScript.Run(ctx, r.rdb, []string{key}, spec.format, spec.oldest, spec.member(), ttl.Milliseconds()).StringSlice()
	if err != nil {
		return fmt.Errorf("lsnstore: redis format check: %w", err)
	}
	r.alive.Answered()
	switch {
	case len(v) == 1 && v[0] == "ok":
		r.format.due.Store(time.Now().Add(ttl / 4).UnixNano())
		return nil
	case len(v) == 3 && v[0] == "no":
		e := &FormatError{Key: key, Found: -1, Member: v[1], Format: spec.format, Oldest: spec.oldest, Release: spec.release}
		if s, ok := parseFormatMember(v[1]); ok {
			e.Found, e.FoundOldest, e.FoundRelease = s.format, s.oldest, s.release
		}
		if ms, err := strconv.ParseFloat(v[2], 64); err == nil {
			e.Until = time.UnixMilli(int64(ms))
		}
		r.format.due.Store(0)
		return e
	}
	return fmt.Errorf("lsnstore: redis format check: unexpected reply %q", v)
}

// verifyFormat is Verify's part: it checks the format when the last
// check is older than a quarter of the format TTL (or never succeeded).
// After a refusal the reader drops what it accepted, so that its reads
// go to the primary until a check succeeds again.
func (rr *RedisReader) verifyFormat(ctx context.Context) error {
	if due := rr.format.due.Load(); due != 0 && time.Now().UnixNano() < due {
		return nil
	}
	err := rr.CheckFormat(ctx)
	if errors.Is(err, ErrStoreFormat) {
		rr.accepted.Store(nil)
	}
	return err
}
