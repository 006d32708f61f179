package lsnstore

import (
	"context"
	"testing"
)

var benchTables = []string{"users", "orders", "order_items"}

func BenchmarkMemoryWritePosition(b *testing.B) {
	m := NewMemory()
	ctx := context.Background()
	if err := m.Raise(ctx, benchTables, PositionOf(100)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.WritePosition(ctx, benchTables); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMemoryRaise(b *testing.B) {
	m := NewMemory()
	ctx := context.Background()
	b.ReportAllocs()
	var pos LSN
	for b.Loop() {
		pos++
		if err := m.Raise(ctx, benchTables, PositionOf(pos)); err != nil {
			b.Fatal(err)
		}
	}
}

func benchRedis(b *testing.B) *Redis {
	_, rdb := redisClient(b)
	// The default Timeout, as in production.
	s := NewRedis(rdb, RedisOptions{Database: uniqueDB("bench")})
	if err := s.Raise(context.Background(), benchTables, PositionOf(100)); err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkRedisWritePosition(b *testing.B) {
	s := benchRedis(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.WritePosition(ctx, benchTables); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRedisRaise(b *testing.B) {
	s := benchRedis(b)
	ctx := context.Background()
	b.ReportAllocs()
	pos := LSN(100)
	for b.Loop() {
		pos++
		if err := s.Raise(ctx, benchTables, PositionOf(pos)); err != nil {
			b.Fatal(err)
		}
	}
}
