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

// benchLanes is a MariaDB position with two GTID domains besides domain 0.
var benchLanes = mustBenchPosition("16/B374D848+1=0/3E8+7=0/14")

func mustBenchPosition(s string) Position {
	p, err := ParsePosition(s)
	if err != nil {
		panic(err)
	}
	return p
}

// BenchmarkMemoryWritePositionLanes: three tables at one position with
// named lanes; merging equal lane sets reuses them.
func BenchmarkMemoryWritePositionLanes(b *testing.B) {
	m := NewMemory()
	ctx := context.Background()
	if err := m.Raise(ctx, benchTables, benchLanes); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.WritePosition(ctx, benchTables); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRedisWritePositionLanes: the same through Redis, where each
// value's lanes are parsed.
func BenchmarkRedisWritePositionLanes(b *testing.B) {
	s := benchRedis(b)
	ctx := context.Background()
	if err := s.Raise(ctx, benchTables, benchLanes); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.WritePosition(ctx, benchTables); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRedisRaiseLanes: the script merges lanes on every raise.
func BenchmarkRedisRaiseLanes(b *testing.B) {
	s := benchRedis(b)
	ctx := context.Background()
	b.ReportAllocs()
	var seq LSN
	for b.Loop() {
		seq++
		pos, _ := NewPosition(seq, Lane{Name: "1", Value: seq}, Lane{Name: "7", Value: 20})
		if err := s.Raise(ctx, benchTables, pos); err != nil {
			b.Fatal(err)
		}
	}
}
