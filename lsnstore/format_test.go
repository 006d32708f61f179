package lsnstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread"
)

// redisZ is a member of the format key recorded until at.
func redisZ(at time.Time, member string) redis.Z {
	return redis.Z{Score: float64(at.UnixMilli()), Member: member}
}

// TestRedisFormatRecorded: a check records this build's format and
// release in the format key, for the store's TTL; a second process of
// the same release checks fine beside it.
func TestRedisFormatRecorded(t *testing.T) {
	_, rdb := redisClient(t)
	ctx := context.Background()
	r := newTestRedis(rdb, RedisOptions{Database: uniqueDB("format")})
	if err := r.CheckFormat(ctx); err != nil {
		t.Fatalf("CheckFormat on an empty store: %v", err)
	}
	if err := newTestRedis(rdb, r.opts).CheckFormat(ctx); err != nil {
		t.Fatalf("CheckFormat of a second process of the same release: %v", err)
	}
	key := r.opts.Prefix + "{" + r.opts.Database + "}-format"
	members, err := rdb.ZRange(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := "1:1:" + freshread.Version()
	if len(members) != 1 || members[0] != want {
		t.Fatalf("format key %s holds %q, want [%q]", key, members, want)
	}
	ttl, err := rdb.PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= DefaultTTL-time.Minute || ttl > DefaultTTL {
		t.Fatalf("format key's TTL %v, want about the store's TTL %v", ttl, DefaultTTL)
	}
}

// TestRedisFormatIncompatibleRefused: a process refuses a store that
// holds a format it cannot run beside, newer or older, with a
// *FormatError wrapping ErrStoreFormat whose message names both formats,
// both releases and the remedy; the refused process records nothing.
func TestRedisFormatIncompatibleRefused(t *testing.T) {
	_, rdb := redisClient(t)
	ctx := context.Background()
	newer := formatSpec{format: FormatVersion + 1, oldest: FormatVersion + 1, release: "9.0.0"}
	t.Run("newer", func(t *testing.T) {
		r := newTestRedis(rdb, RedisOptions{Database: uniqueDB("format-newer")})
		if err := r.checkFormat(ctx, newer); err != nil {
			t.Fatalf("the newer release on an empty store: %v", err)
		}
		err := r.CheckFormat(ctx)
		var fe *FormatError
		if !errors.Is(err, ErrStoreFormat) || !errors.As(err, &fe) {
			t.Fatalf("CheckFormat beside format %d that does not run beside %d = %v; want a *FormatError", newer.format, FormatVersion, err)
		}
		t.Logf("refusal: %v", err)
		if fe.Found != newer.format || fe.FoundRelease != "9.0.0" || fe.Format != FormatVersion || fe.Release != freshread.Version() {
			t.Fatalf("FormatError %+v", fe)
		}
		for _, s := range []string{"freshread 9.0.0 (format 2)", "freshread " + freshread.Version() + " (format 1)", "run 9.0.0 or a later release here too"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("the error does not say %q: %v", s, err)
			}
		}
		members, _ := rdb.ZRange(ctx, r.formatKey(), 0, -1).Result()
		if len(members) != 1 {
			t.Fatalf("the refused process recorded itself: %q", members)
		}
	})
	t.Run("older", func(t *testing.T) {
		r := newTestRedis(rdb, RedisOptions{Database: uniqueDB("format-older")})
		if err := r.CheckFormat(ctx); err != nil {
			t.Fatal(err)
		}
		err := r.checkFormat(ctx, newer)
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Found != FormatVersion || fe.Format != newer.format {
			t.Fatalf("format %d (oldest %d) beside format %d = %v; want a *FormatError", newer.format, newer.oldest, FormatVersion, err)
		}
		t.Logf("refusal: %v", err)
		for _, s := range []string{"freshread " + freshread.Version() + " (format 1)", "freshread 9.0.0 (format 2)", "stop every process of " + freshread.Version(), r.formatKey()} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("the error does not say %q: %v", s, err)
			}
		}
		if time.Until(fe.Until) < DefaultTTL-time.Minute {
			t.Errorf("FormatError.Until %v: want the store's TTL from now", fe.Until)
		}
	})
	t.Run("unparseable", func(t *testing.T) {
		r := newTestRedis(rdb, RedisOptions{Database: uniqueDB("format-odd")})
		if err := rdb.ZAdd(ctx, r.formatKey(), redisZ(time.Now().Add(time.Minute), "v3;whatever")).Err(); err != nil {
			t.Fatal(err)
		}
		err := r.CheckFormat(ctx)
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Found != -1 || fe.Member != "v3;whatever" || !strings.Contains(err.Error(), "upgrade this process") {
			t.Fatalf("CheckFormat beside an unparseable member = %v", err)
		}
	})
}

// TestRedisFormatCompatibleSideBySide: a newer format whose release runs
// beside this one works beside it, whichever checks first; an older
// process learns it from the newer one's member.
func TestRedisFormatCompatibleSideBySide(t *testing.T) {
	_, rdb := redisClient(t)
	ctx := context.Background()
	compatible := formatSpec{format: FormatVersion + 1, oldest: FormatVersion, release: "0.9.0"}
	for _, newerFirst := range []bool{false, true} {
		r := newTestRedis(rdb, RedisOptions{Database: uniqueDB("format-compatible")})
		first, second := r.CheckFormat, func(ctx context.Context) error { return r.checkFormat(ctx, compatible) }
		if newerFirst {
			first, second = second, first
		}
		if err := first(ctx); err != nil {
			t.Fatalf("newer first %v: the first process: %v", newerFirst, err)
		}
		if err := second(ctx); err != nil {
			t.Fatalf("newer first %v: the second process: %v", newerFirst, err)
		}
		if n, _ := rdb.ZCard(ctx, r.formatKey()).Result(); n != 2 {
			t.Fatalf("newer first %v: %d members, want both releases", newerFirst, n)
		}
	}
}

// TestRedisFormatLapses: a format no process checks for the store's TTL
// lapses, and an incompatible release may then start.
func TestRedisFormatLapses(t *testing.T) {
	_, rdb := redisClient(t)
	ctx := context.Background()
	r := newTestRedis(rdb, RedisOptions{Database: uniqueDB("format-lapse"), TTL: 300 * time.Millisecond})
	newer := formatSpec{format: FormatVersion + 1, oldest: FormatVersion + 1, release: "9.0.0"}
	if err := r.checkFormat(ctx, newer); err != nil {
		t.Fatal(err)
	}
	if err := r.CheckFormat(ctx); !errors.Is(err, ErrStoreFormat) {
		t.Fatalf("CheckFormat while the newer format is recorded = %v, want ErrStoreFormat", err)
	}
	time.Sleep(400 * time.Millisecond)
	if err := r.CheckFormat(ctx); err != nil {
		t.Fatalf("CheckFormat after the newer format lapsed: %v", err)
	}
}

// TestRedisReaderRefusesIncompatibleFormat: a reader that accepted the
// store and later finds an incompatible format at its Verify (a process
// of another release started while this one was cut off) refuses it and
// drops its acceptance: its reads refuse (ErrDiscontinuity) instead of
// trusting the store.
func TestRedisReaderRefusesIncompatibleFormat(t *testing.T) {
	_, rdb := redisClient(t)
	ctx := context.Background()
	r := newTestRedis(rdb, RedisOptions{Database: uniqueDB("format-reader")})
	rr := r.NewReader()
	e, err := rr.Verify(ctx)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	rr.Accept(e)
	if _, err := rr.WritePosition(ctx, []string{"t"}); err != nil {
		t.Fatalf("WritePosition after Accept: %v", err)
	}
	if err := rdb.Del(ctx, r.formatKey()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.checkFormat(ctx, formatSpec{format: FormatVersion + 1, oldest: FormatVersion + 1, release: "9.0.0"}); err != nil {
		t.Fatal(err)
	}
	r.format.due.Store(0) // the renewal is due
	if _, err := rr.Verify(ctx); !errors.Is(err, ErrStoreFormat) {
		t.Fatalf("Verify beside an incompatible format = %v, want ErrStoreFormat", err)
	}
	if _, err := rr.WritePosition(ctx, []string{"t"}); !IsDiscontinuity(err) {
		t.Fatalf("WritePosition after the refusal = %v, want ErrDiscontinuity", err)
	}
	if _, err := rr.Verify(ctx); !errors.Is(err, ErrStoreFormat) {
		t.Fatalf("a second Verify = %v, want ErrStoreFormat again", err)
	}
}
