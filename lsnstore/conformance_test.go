package lsnstore

import (
	"context"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
)

// newStoreFunc returns an empty store for database db; two calls with
// different names must give stores of different databases (on the same
// server, for Redis).
type newStoreFunc func(t *testing.T, db string) Store

// replayReader is implemented by both stores beside Store.
type replayReader interface {
	ReplayPosition(ctx context.Context) (Position, error)
}

func mustLSN(t testing.TB, s string) LSN {
	t.Helper()
	l, err := ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func checkWrite(t *testing.T, s Store, tables []string, want LSN) {
	t.Helper()
	checkWritePos(t, s, tables, PositionOf(want))
}

func checkWritePos(t *testing.T, s Store, tables []string, want Position) {
	t.Helper()
	got, err := s.WritePosition(context.Background(), tables)
	if err != nil {
		t.Fatalf("WritePosition(%q): %v", tables, err)
	}
	if !got.Equal(want) {
		t.Fatalf("WritePosition(%q) = %v; want %v", tables, got, want)
	}
}

func raiseOK(t *testing.T, s Store, tables []string, pos LSN) {
	t.Helper()
	raisePosOK(t, s, tables, PositionOf(pos))
}

func raisePosOK(t *testing.T, s Store, tables []string, pos Position) {
	t.Helper()
	if err := s.Raise(context.Background(), tables, pos); err != nil {
		t.Fatalf("Raise(%q, %v): %v", tables, pos, err)
	}
}

func positions(m map[string]LSN) map[string]Position {
	if m == nil {
		return nil
	}
	out := make(map[string]Position, len(m))
	for k, v := range m {
		out[k] = PositionOf(v)
	}
	return out
}

func publishOK(t *testing.T, s Store, m map[string]LSN) {
	t.Helper()
	publishPosOK(t, s, positions(m))
}

func publishPosOK(t *testing.T, s Store, m map[string]Position) {
	t.Helper()
	if err := s.PublishReplay(context.Background(), m); err != nil {
		t.Fatalf("PublishReplay(%v): %v", m, err)
	}
}

func checkReplay(t *testing.T, s Store, want map[string]LSN, wantMin LSN) {
	t.Helper()
	checkReplayPos(t, s, positions(want), PositionOf(wantMin))
}

func checkReplayPos(t *testing.T, s Store, want map[string]Position, wantMin Position) {
	t.Helper()
	got, err := s.ReplayPositions(context.Background())
	if err != nil {
		t.Fatalf("ReplayPositions: %v", err)
	}
	if got == nil || !maps.EqualFunc(got, want, Position.Equal) {
		t.Fatalf("ReplayPositions = %v; want %v", got, want)
	}
	min, err := s.(replayReader).ReplayPosition(context.Background())
	if err != nil || !min.Equal(wantMin) {
		t.Fatalf("ReplayPosition = %v, %v; want %v", min, err, wantMin)
	}
}

// checkConformance runs the assertions every Store must pass.
func checkConformance(t *testing.T, newStore newStoreFunc) {
	t.Run("Keyed", func(t *testing.T) {
		s := newStore(t, "keyed")
		k1, k2 := KeyName("t", "id", 1), KeyName("t", "id", 2)
		// A write that proved it touched row 1 only.
		raiseOK(t, s, []string{KeyedTable("t"), k1}, 10)
		checkWrite(t, s, []string{"t"}, 10)                  // the table: every write
		checkWrite(t, s, []string{UnkeyedName("t"), k1}, 10) // row 1
		checkWrite(t, s, []string{UnkeyedName("t"), k2}, 0)  // row 2: untouched
		// A write that proves nothing (a plain table name, as the tracker
		// and every writer unaware of keys give it) raises the unkeyed
		// position, which every keyed read includes.
		raiseOK(t, s, []string{"t"}, 20)
		checkWrite(t, s, []string{UnkeyedName("t"), k2}, 20)
		checkWrite(t, s, []string{"t"}, 20)
		raiseOK(t, s, []string{KeyedTable("t"), k2}, 30)
		checkWrite(t, s, []string{UnkeyedName("t"), k1}, 20)
		checkWrite(t, s, []string{UnkeyedName("t"), k2}, 30)
		checkWrite(t, s, []string{UnkeyedName("t"), k1, k2}, 30)
		checkWrite(t, s, []string{"u"}, 0) // another table
		checkWrite(t, s, nil, 30)
		// A write that proved its user_id but not its id raises the id
		// column's unkeyed position, not the table's.
		u7, u8 := KeyName("t", "user_id", 7), KeyName("t", "user_id", 8)
		raiseOK(t, s, []string{KeyedTable("t"), u7, UnkeyedColumnName("t", "id")}, 40)
		checkWrite(t, s, []string{UnkeyedName("t"), UnkeyedColumnName("t", "user_id"), u8}, 20)
		checkWrite(t, s, []string{UnkeyedName("t"), UnkeyedColumnName("t", "user_id"), u7}, 40)
		checkWrite(t, s, []string{UnkeyedName("t"), UnkeyedColumnName("t", "id"), k1}, 40)
		checkWrite(t, s, []string{"t"}, 40)
	})
	t.Run("KeySignatures", func(t *testing.T) {
		s := newStore(t, "signatures")
		ks, ok := s.(KeySignatures)
		if !ok {
			t.Skip("the store keeps no key signatures")
		}
		ctx := context.Background()
		k1 := KeyName("t", "id", 1)
		// The first keyed write of t records its writer's signature, and
		// raises no unkeyed position.
		raiseOK(t, s, []string{SignedKeyedTable("t", "v1:id;"), k1}, 10)
		checkWrite(t, s, []string{UnkeyedName("t")}, 0)
		checkWrite(t, s, []string{"t"}, 10)
		if got, _, err := ks.ClaimSignature(ctx, "t", "v1:id;user_id"); err != nil || got != "v1:id;" {
			t.Fatalf("ClaimSignature after a signed write = %q, %v; want the writer's", got, err)
		}
		// A keyed write by a writer of another signature raises the
		// unkeyed position too: every keyed reader waits for it.
		raiseOK(t, s, []string{SignedKeyedTable("t", "v1:id;user_id"), k1}, 20)
		checkWrite(t, s, []string{UnkeyedName("t")}, 20)
		raiseOK(t, s, []string{SignedKeyedTable("t", "v1:id;"), k1}, 30)
		checkWrite(t, s, []string{UnkeyedName("t")}, 20)
		checkWrite(t, s, []string{UnkeyedName("t"), k1}, 30)
		// A claim records the first signature only; other tables are
		// apart.
		if got, _, err := ks.ClaimSignature(ctx, "u", "v1:id;"); err != nil || got != "v1:id;" {
			t.Fatalf("first ClaimSignature of u = %q, %v", got, err)
		}
		if got, _, err := ks.ClaimSignature(ctx, "u", "v1:uid;"); err != nil || got != "v1:id;" {
			t.Fatalf("second ClaimSignature of u = %q, %v; want the first", got, err)
		}
		raiseOK(t, s, []string{SignedKeyedTable("u", "v1:uid;"), KeyName("u", "uid", 5)}, 40)
		checkWrite(t, s, []string{UnkeyedName("u")}, 40)
		checkWrite(t, s, []string{UnkeyedName("t")}, 20)
	})
	t.Run("Empty", func(t *testing.T) {
		s := newStore(t, "empty")
		checkWrite(t, s, nil, 0)
		checkWrite(t, s, []string{}, 0)
		checkWrite(t, s, []string{"a", "b"}, 0)
		checkReplay(t, s, map[string]LSN{}, 0)
	})
	t.Run("RaiseNeverLowers", func(t *testing.T) {
		s := newStore(t, "lower")
		raiseOK(t, s, []string{"a"}, 100)
		raiseOK(t, s, []string{"a"}, 50)
		checkWrite(t, s, []string{"a"}, 100)
		raiseOK(t, s, []string{"a"}, 0) // a no-op
		checkWrite(t, s, []string{"a"}, 100)
		raiseOK(t, s, []string{"a"}, 200)
		checkWrite(t, s, []string{"a"}, 200)
		// Numeric, not textual, comparison of both halves.
		for _, step := range [][2]string{
			{"9/FFFFFFFF", "A/0"},
			{"F/FFFFFFFF", "10/0"},
			{"10/9", "10/10"},
			{"10/FFFFFFF", "10/10000000"},
		} {
			lo, hi := mustLSN(t, step[0]), mustLSN(t, step[1])
			raiseOK(t, s, []string{"b"}, lo)
			raiseOK(t, s, []string{"b"}, hi)
			raiseOK(t, s, []string{"b"}, lo)
			checkWrite(t, s, []string{"b"}, hi)
		}
		checkWrite(t, s, nil, mustLSN(t, "10/10000000"))
	})
	t.Run("Tables", func(t *testing.T) {
		s := newStore(t, "tables")
		raiseOK(t, s, []string{"a"}, 100)
		raiseOK(t, s, []string{"b", "c"}, 200)
		checkWrite(t, s, []string{"a"}, 100)
		checkWrite(t, s, []string{"b"}, 200)
		checkWrite(t, s, []string{"c"}, 200)
		checkWrite(t, s, []string{"a", "b"}, 200)
		checkWrite(t, s, []string{"a", "a"}, 100)
		checkWrite(t, s, []string{"d"}, 0)
		checkWrite(t, s, []string{}, 0)
		checkWrite(t, s, nil, 200)
		raiseOK(t, s, []string{}, 300) // no tables: only the maximum
		checkWrite(t, s, []string{"a", "b", "c"}, 200)
		checkWrite(t, s, nil, 300)
	})
	t.Run("UnknownTablesInEveryRead", func(t *testing.T) {
		s := newStore(t, "unknown")
		raiseOK(t, s, []string{"a"}, 100)
		raiseOK(t, s, nil, 300)
		for _, tables := range [][]string{{"a"}, {"b"}, {}, {"a", "b"}, nil} {
			checkWrite(t, s, tables, 300)
		}
		raiseOK(t, s, []string{"a"}, 400)
		checkWrite(t, s, []string{"a"}, 400)
		checkWrite(t, s, []string{"b"}, 300)
		checkWrite(t, s, nil, 400)
		raiseOK(t, s, nil, 200) // never lowers the unknown position either
		checkWrite(t, s, []string{"b"}, 300)
	})
	t.Run("NilTablesIsDatabaseMax", func(t *testing.T) {
		s := newStore(t, "max")
		for i, tb := range []string{"a", "b", "c", "d"} {
			raiseOK(t, s, []string{tb}, LSN(1000-i*100))
		}
		checkWrite(t, s, nil, 1000)
		checkWrite(t, s, []string{"d"}, 700)
	})
	t.Run("Replay", func(t *testing.T) {
		s := newStore(t, "replay")
		publishOK(t, s, map[string]LSN{"r1": 100, "r2": 50})
		checkReplay(t, s, map[string]LSN{"r1": 100, "r2": 50}, 50)
		publishOK(t, s, map[string]LSN{"r1": 80, "r2": 70}) // r1 never moves back
		checkReplay(t, s, map[string]LSN{"r1": 100, "r2": 70}, 70)
		publishOK(t, s, map[string]LSN{"r1": 120}) // r2 removed
		checkReplay(t, s, map[string]LSN{"r1": 120}, 120)
		publishOK(t, s, map[string]LSN{"r1": 120, "r2": 10}) // r2 back, not below 70
		checkReplay(t, s, map[string]LSN{"r1": 120, "r2": 70}, 70)
		publishOK(t, s, map[string]LSN{"r1": mustLSN(t, "10/0"), "r2": mustLSN(t, "F/FFFFFFFF")})
		checkReplay(t, s, map[string]LSN{"r1": mustLSN(t, "10/0"), "r2": mustLSN(t, "F/FFFFFFFF")}, mustLSN(t, "F/FFFFFFFF"))
		publishOK(t, s, nil) // nothing
		publishOK(t, s, map[string]LSN{})
		checkReplay(t, s, map[string]LSN{"r1": mustLSN(t, "10/0"), "r2": mustLSN(t, "F/FFFFFFFF")}, mustLSN(t, "F/FFFFFFFF"))
		// Write positions are separate.
		checkWrite(t, s, nil, 0)
	})
	t.Run("TwoDatabases", func(t *testing.T) {
		s1, s2 := newStore(t, "db1"), newStore(t, "db2")
		raiseOK(t, s1, []string{"a"}, 100)
		raiseOK(t, s1, nil, 50)
		publishOK(t, s1, map[string]LSN{"r1": 10})
		checkWrite(t, s2, []string{"a"}, 0)
		checkWrite(t, s2, nil, 0)
		checkReplay(t, s2, map[string]LSN{}, 0)
		raiseOK(t, s2, []string{"a"}, 7)
		checkWrite(t, s1, []string{"a"}, 100)
		checkWrite(t, s2, []string{"a"}, 7)
	})
	t.Run("Lanes", func(t *testing.T) {
		s := newStore(t, "lanes")
		raisePosOK(t, s, []string{"a"}, mustPos(t, "0/64+1=0/14"))
		raisePosOK(t, s, []string{"a"}, mustPos(t, "0/C8")) // main up, lane 1 kept
		checkWritePos(t, s, []string{"a"}, mustPos(t, "0/C8+1=0/14"))
		raisePosOK(t, s, []string{"a"}, mustPos(t, "0/1+1=0/2+2=0/5")) // lane 2 added, lane 1 not lowered
		checkWritePos(t, s, []string{"a"}, mustPos(t, "0/C8+1=0/14+2=0/5"))
		raisePosOK(t, s, []string{"a"}, mustPos(t, "0/1+1=0/2")) // covered: nothing changes
		checkWritePos(t, s, []string{"a"}, mustPos(t, "0/C8+1=0/14+2=0/5"))
		raisePosOK(t, s, []string{"b"}, mustPos(t, "0/1+1=0/FF+3=0/1"))
		checkWritePos(t, s, []string{"a", "b"}, mustPos(t, "0/C8+1=0/FF+2=0/5+3=0/1"))
		checkWritePos(t, s, nil, mustPos(t, "0/C8+1=0/FF+2=0/5+3=0/1"))
		raisePosOK(t, s, nil, mustPos(t, "0/0+9=0/1")) // unknown tables: in every read
		checkWritePos(t, s, []string{"c"}, mustPos(t, "0/0+9=0/1"))
		checkWritePos(t, s, []string{"b"}, mustPos(t, "0/1+1=0/FF+3=0/1+9=0/1"))

		publishPosOK(t, s, map[string]Position{"r1": mustPos(t, "0/64+1=0/A+2=0/3"), "r2": mustPos(t, "0/32+1=0/14")})
		checkReplayPos(t, s, map[string]Position{"r1": mustPos(t, "0/64+1=0/A+2=0/3"), "r2": mustPos(t, "0/32+1=0/14")}, mustPos(t, "0/32+1=0/A"))
		publishPosOK(t, s, map[string]Position{"r1": mustPos(t, "0/65"), "r2": mustPos(t, "0/33+2=0/1")}) // lanes never move back
		checkReplayPos(t, s, map[string]Position{"r1": mustPos(t, "0/65+1=0/A+2=0/3"), "r2": mustPos(t, "0/33+1=0/14+2=0/1")}, mustPos(t, "0/33+1=0/A+2=0/1"))
	})
	t.Run("ConcurrentRaisers", func(t *testing.T) {
		s := newStore(t, "concurrent")
		const goroutines, each = 16, 40
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			maxHot   Position
			maxRepl  Position
			firstErr error
		)
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 42))
				var hot, repl Position
				for range each {
					pos := randomLanes(rng)
					err := s.Raise(context.Background(), []string{"hot", "other"}, pos)
					hot = hot.Merge(pos)
					if err == nil && g%4 == 0 {
						p := randomLanes(rng)
						err = s.PublishReplay(context.Background(), map[string]Position{"r": p})
						repl = repl.Merge(p)
					}
					if err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
						return
					}
				}
				mu.Lock()
				maxHot, maxRepl = maxHot.Merge(hot), maxRepl.Merge(repl)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if firstErr != nil {
			t.Fatal(firstErr)
		}
		checkWritePos(t, s, []string{"hot"}, maxHot)
		checkWritePos(t, s, []string{"other"}, maxHot)
		checkWritePos(t, s, nil, maxHot)
		checkReplayPos(t, s, map[string]Position{"r": maxRepl}, maxRepl)
	})
}

// randomLanes draws a position with large random values in the main lane
// and in some of three named lanes, so concurrent raisers must merge.
func randomLanes(rng *rand.Rand) Position {
	var ls []Lane
	for _, name := range []string{"1", "2", "3e11fa47-71ca-11e1-9e33-c80aa9429562"} {
		if rng.IntN(2) == 0 {
			ls = append(ls, Lane{Name: name, Value: LSN(rng.Uint64() >> 8)})
		}
	}
	p, _ := NewPosition(LSN(rng.Uint64()>>8|1), ls...)
	return p
}
