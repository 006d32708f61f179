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

var (
	_ DecodedStore = (*Memory)(nil)
	_ DecodedStore = (*Redis)(nil)
)

// decodedKey is P{D}-decoded_lsn.
func (r *Redis) decodedKey() string { return r.base + "decoded_lsn" }

// PublishDecoded sets the decoded position with the store's TTL.
func (r *Redis) PublishDecoded(ctx context.Context, pos LSN) error {
	if r.err != nil {
		return r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	if err := r.rdb.Set(ctx, r.decodedKey(), pos.String(), r.KeyTTL()).Err(); err != nil {
		return fmt.Errorf("lsnstore: redis publish decoded position: %w", err)
	}
	return nil
}

// DecodedPosition reads the decoded position (0 when the key is missing).
func (r *Redis) DecodedPosition(ctx context.Context) (LSN, error) {
	if r.err != nil {
		return 0, r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	s, err := r.rdb.Get(ctx, r.decodedKey()).Result()
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
