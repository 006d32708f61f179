package lsnstore

import (
	"context"
	"testing"
	"time"
)

// TestRedisDecodedPositions: a tracker of this version publishes its
// decoded position for every plugin and for plugins that read by key; one
// that only set the old key (a tracker built before unkeyed positions)
// reads as not decoding to the latter.
func TestRedisDecodedPositions(t *testing.T) {
	_, rdb := redisClient(t)
	ctx := context.Background()
	s := newTestRedis(rdb, RedisOptions{Database: uniqueDB("decoded")})
	if err := s.PublishDecoded(ctx, 42); err != nil {
		t.Fatal(err)
	}
	for name, get := range map[string]func(context.Context) (LSN, error){"DecodedPosition": s.DecodedPosition, "UnkeyedDecodedPosition": s.UnkeyedDecodedPosition} {
		if got, err := get(ctx); err != nil || got != 42 {
			t.Errorf("%s = %v, %v; want 0/2A", name, got, err)
		}
	}
	if ttl := rdb.PTTL(ctx, s.unkeyedDecodedKey()).Val(); ttl <= 0 || ttl > s.KeyTTL() {
		t.Errorf("PTTL of the unkeyed decoded key = %v, want in (0, %v]", ttl, s.KeyTTL())
	}

	old := newTestRedis(rdb, RedisOptions{Database: uniqueDB("decoded-old")})
	if err := rdb.Set(ctx, old.decodedKey(), LSN(42).String(), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := old.UnkeyedDecodedPosition(ctx); err != nil || got != 0 {
		t.Errorf("UnkeyedDecodedPosition after an old tracker's publication = %v, %v; want 0", got, err)
	}
	if got, err := old.DecodedPosition(ctx); err != nil || got != 42 {
		t.Errorf("DecodedPosition after an old tracker's publication = %v, %v; want 0/2A", got, err)
	}
}
