package lsnstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// DecodedStore holds how far the tracker's logical decoding has published
// the writes made outside the application: every transaction that
// committed at or before the decoded position has raised its tables'
// positions. The key expires (the store's TTL) when the tracker stops
// publishing it, so a dead tracker reads as "not decoding" (0).
type DecodedStore interface {
	PublishDecoded(ctx context.Context, pos LSN) error
	// DecodedPosition returns 0 when nothing (or nothing recent) was
	// published.
	DecodedPosition(ctx context.Context) (LSN, error)
}

// UnkeyedDecodedStore is a DecodedStore that also says how far a tracker
// whose raises include unkeyed positions (keys.go: every tracker built
// with them) has decoded. A tracker built before keyed positions publishes
// only DecodedPosition: a plugin that reads by key must not trust it (its
// direct writes never raised the unkeyed positions keyed reads look at).
type UnkeyedDecodedStore interface {
	DecodedStore
	// UnkeyedDecodedPosition is DecodedPosition as published by a tracker
	// whose raises include unkeyed positions; 0 when none did.
	UnkeyedDecodedPosition(ctx context.Context) (LSN, error)
}

var (
	_ DecodedStore        = (*Memory)(nil)
	_ UnkeyedDecodedStore = (*Redis)(nil)
)

// unkeyedDecodedKey is P{D}-decoded_lsn-unkeyed.
func (r *Redis) unkeyedDecodedKey() string { return r.base + "decoded_lsn-unkeyed" }

// decodedKey is P{D}-decoded_lsn.
func (r *Redis) decodedKey() string { return r.base + "decoded_lsn" }

// PublishDecoded sets the decoded position with the store's TTL, under
// both keys: the one every plugin reads and the one plugins that read by
// key read (this tracker raises unkeyed positions). One round trip.
func (r *Redis) PublishDecoded(ctx context.Context, pos LSN) error {
	if r.err != nil {
		return r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, r.decodedKey(), pos.String(), r.KeyTTL())
		p.Set(ctx, r.unkeyedDecodedKey(), pos.String(), r.KeyTTL())
		return nil
	})
	if err != nil {
		return fmt.Errorf("lsnstore: redis publish decoded position: %w", err)
	}
	return nil
}

// DecodedPosition reads the decoded position (0 when the key is missing).
func (r *Redis) DecodedPosition(ctx context.Context) (LSN, error) {
	return r.getDecoded(ctx, r.decodedKey())
}

// UnkeyedDecodedPosition implements UnkeyedDecodedStore.
func (r *Redis) UnkeyedDecodedPosition(ctx context.Context) (LSN, error) {
	return r.getDecoded(ctx, r.unkeyedDecodedKey())
}

func (r *Redis) getDecoded(ctx context.Context, key string) (LSN, error) {
	if r.err != nil {
		return 0, r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	s, err := r.rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("lsnstore: redis GET decoded position: %w", err)
	}
	return ParseLSN(s)
}

// PublishDecoded records the decoded position (no expiry in memory).
func (m *Memory) PublishDecoded(_ context.Context, pos LSN) error {
	m.decoded.Store(uint64(pos))
	return nil
}

// DecodedPosition returns the recorded decoded position.
func (m *Memory) DecodedPosition(context.Context) (LSN, error) {
	return LSN(m.decoded.Load()), nil
}
