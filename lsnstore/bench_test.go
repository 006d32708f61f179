package lsnstore

import (
	"context"
	"strconv"
	"strings"
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

// keyNames is a keyed write's names: the table and n keys from first on.
func keyNames(first, n int) []string {
	names := []string{KeyedTable("orders")}
	for i := range n {
		names = append(names, KeyName("orders", "id", int64(first+i)))
	}
	return names
}

// BenchmarkRedisRaiseKeys is one keyed write of 256 rows (the plugin's
// cap; above it a write raises the unkeyed position): one script call.
func BenchmarkRedisRaiseKeys(b *testing.B) {
	s := benchRedis(b)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if err := s.Raise(ctx, keyNames(i*256, 256), PositionOf(LSN(i))); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRedisKeyMemory reports the Redis memory one key position takes
// (used_memory after raising b.N distinct keys, 256 per call, over b.N).
func BenchmarkRedisKeyMemory(b *testing.B) {
	s := benchRedis(b)
	ctx := context.Background()
	used := func() float64 {
		v, err := s.rdb.Info(ctx, "memory").Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range strings.Split(v, "\r\n") {
			if n, ok := strings.CutPrefix(l, "used_memory:"); ok {
				f, _ := strconv.ParseFloat(n, 64)
				return f
			}
		}
		b.Fatal("no used_memory")
		return 0
	}
	before := used()
	b.ResetTimer()
	for i := 0; i < b.N; i += 256 {
		if err := s.Raise(ctx, keyNames(i, min(256, b.N-i)), PositionOf(LSN(i+1))); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric((used()-before)/float64(b.N), "bytes/key")
	b.ReportMetric(0, "ns/op")
}
