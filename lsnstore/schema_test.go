package lsnstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// schemaStore is a store with schema changes (Memory, Redis).
type schemaStore interface {
	Store
	SchemaChanges
}

func TestMemorySchemaChanges(t *testing.T) {
	checkSchemaChanges(t, func(string) schemaStore { return NewMemory() })
}

func TestRedisSchemaChanges(t *testing.T) {
	_, rdb := redisClient(t)
	checkSchemaChanges(t, func(db string) schemaStore {
		return newTestRedis(rdb, RedisOptions{Database: uniqueDB(db)})
	})
}

// checkSchemaChanges: a checked raise raises the unknown-tables position
// to its own position, and says so, exactly when the store's schema
// generation is not the caller's graph's or a schema change is under
// way; and it still raises what Raise raises.
func checkSchemaChanges(t *testing.T, newStore func(db string) schemaStore) {
	ctx := context.Background()
	pos := func(s string) Position { return mustPos(t, s) }
	unknownAt := func(t *testing.T, s schemaStore) Position {
		t.Helper()
		p, err := s.WritePosition(ctx, []string{"untouched"})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	raise := func(t *testing.T, s schemaStore, tables []string, p string, c SchemaCheck) SchemaVerdict {
		t.Helper()
		v, err := s.RaiseChecked(ctx, tables, pos(p), c)
		if err != nil {
			t.Fatalf("RaiseChecked(%q, %s, %+v): %v", tables, p, c, err)
		}
		return v
	}
	generation := func(t *testing.T, s schemaStore) string {
		t.Helper()
		g, err := s.SchemaGeneration(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	check := func(g string) SchemaCheck { return SchemaCheck{Graph: g, Check: true} }

	t.Run("no schema change", func(t *testing.T) {
		s := newStore("schema-none")
		if g := generation(t, s); g != "" {
			t.Fatalf("generation %q in a new store, want none", g)
		}
		if v := raise(t, s, []string{"a"}, "0/50", check("")); v.Raised() {
			t.Fatalf("verdict %+v without a schema change", v)
		}
		if p := unknownAt(t, s); !p.IsZero() {
			t.Fatalf("unknown-tables position %v, want none", p)
		}
		if p, _ := s.WritePosition(ctx, []string{"a"}); !p.Equal(pos("0/50")) {
			t.Fatalf("a at %v, want 0/50", p)
		}
	})

	t.Run("generation against the graph", func(t *testing.T) {
		s := newStore("schema-graph")
		if err := s.AdvanceSchema(ctx); err != nil {
			t.Fatal(err)
		}
		g1 := generation(t, s)
		if g1 == "" {
			t.Fatal("no generation after a change")
		}
		// A graph learned after the change: nothing more, however idle the
		// database (the same write position again).
		for range 2 {
			if v := raise(t, s, []string{"a"}, "0/120", check(g1)); v.Raised() {
				t.Fatalf("graph after the change: verdict %+v", v)
			}
		}
		if p := unknownAt(t, s); !p.IsZero() {
			t.Fatalf("unknown-tables position %v after a current graph's raise", p)
		}
		// Not checked: nothing more.
		if v := raise(t, s, []string{"a"}, "0/130", SchemaCheck{Graph: "old"}); v.Raised() {
			t.Fatalf("unchecked: verdict %+v", v)
		}
		// Learned before the change (no generation, another one), or when
		// the generation could not be read: stale, and the unknown-tables
		// position is raised to the write's position.
		for i, g := range []string{"", "x.1", "\x00unread"} {
			w := []string{"0/140", "0/150", "0/160"}[i]
			if v := raise(t, s, []string{"a"}, w, check(g)); !v.Stale || v.Pending {
				t.Fatalf("graph at %q, store at %q: verdict %+v, want stale", g, g1, v)
			}
			if p := unknownAt(t, s); !p.Equal(pos(w)) {
				t.Fatalf("graph at %q: unknown-tables position %v, want %s", g, p, w)
			}
		}
		// A raise of unknown tables is checked too.
		if v := raise(t, s, nil, "0/170", check("")); !v.Stale {
			t.Fatalf("unknown tables, old graph: verdict %+v", v)
		}
		if p, _ := s.WritePosition(ctx, []string{"a"}); !p.Equal(pos("0/170")) {
			t.Fatalf("a at %v, want 0/170", p)
		}
		// Every change moves the generation.
		if err := s.AdvanceSchema(ctx); err != nil {
			t.Fatal(err)
		}
		if g2 := generation(t, s); g2 == g1 || g2 == "" {
			t.Fatalf("generation %q after a second change (first %q)", g2, g1)
		}
		if v := raise(t, s, []string{"a"}, "0/180", check(g1)); !v.Stale {
			t.Fatalf("graph between the changes: verdict %+v, want stale", v)
		}
	})

	t.Run("a raise that publishes a change", func(t *testing.T) {
		s := newStore("schema-changed")
		g0 := generation(t, s)
		// A change with writes through it (a transaction): its graph
		// predates it.
		if v := raise(t, s, []string{"a"}, "0/200", SchemaCheck{Graph: g0, Check: true, Changed: true}); !v.Stale {
			t.Fatalf("the change's raise, counted against its graph: verdict %+v, want stale", v)
		}
		g1 := generation(t, s)
		if g1 == g0 {
			t.Fatalf("generation %q unchanged by the change's raise", g1)
		}
		if v := raise(t, s, []string{"b"}, "0/210", check(g0)); !v.Stale {
			t.Fatalf("graph before the change: verdict %+v", v)
		}
		if v := raise(t, s, []string{"b"}, "0/210", check(g1)); v.Raised() {
			t.Fatalf("graph after the change: verdict %+v", v)
		}
		// A schema statement alone is checked before its own change.
		if v := raise(t, s, []string{"a"}, "0/220", SchemaCheck{Graph: g1, Check: true, Changed: true, Before: true}); v.Raised() {
			t.Fatalf("a schema statement alone, graph current before it: verdict %+v", v)
		}
		g2 := generation(t, s)
		if g2 == g1 {
			t.Fatalf("generation %q unchanged by a schema statement's raise", g2)
		}
		if v := raise(t, s, []string{"b"}, "0/230", check(g1)); !v.Stale {
			t.Fatalf("graph before the statement: verdict %+v, want stale", v)
		}
		if v := raise(t, s, []string{"a"}, "0/240", SchemaCheck{Graph: g1, Check: true, Changed: true, Before: true}); !v.Stale {
			t.Fatalf("a schema statement alone, graph stale before it: verdict %+v, want stale", v)
		}
	})

	t.Run("marks", func(t *testing.T) {
		s := newStore("schema-marks")
		m1, err := s.BeginSchemaChange(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := s.BeginSchemaChange(ctx)
		if err != nil || m1 == m2 {
			t.Fatalf("second mark %q (first %q): %v", m2, m1, err)
		}
		// While a change is under way, every checked raise raises the
		// unknown-tables position, whatever its graph.
		if v := raise(t, s, []string{"a"}, "0/300", check(generation(t, s))); !v.Pending || v.Stale {
			t.Fatalf("under way: verdict %+v, want pending", v)
		}
		if p := unknownAt(t, s); !p.Equal(pos("0/300")) {
			t.Fatalf("unknown-tables position %v, want 0/300", p)
		}
		if v := raise(t, s, []string{"a"}, "0/310", SchemaCheck{}); !v.Pending {
			t.Fatalf("under way, unchecked graph: verdict %+v, want pending", v)
		}
		// The raise that publishes m1 ends it; m2 is still under way.
		if v := raise(t, s, []string{"a"}, "0/320", SchemaCheck{Graph: generation(t, s), Check: true, Changed: true, Before: true, Done: []string{m1}}); !v.Pending || v.Stale {
			t.Fatalf("m1 published, m2 under way: verdict %+v", v)
		}
		if err := s.EndSchemaChanges(ctx, []string{m2}); err != nil {
			t.Fatal(err)
		}
		// A graph learned after the change is current.
		if v := raise(t, s, []string{"a"}, "0/330", check(generation(t, s))); v.Raised() {
			t.Fatalf("every change ended: verdict %+v", v)
		}
		// A plain Raise checks nothing.
		m3, err := s.BeginSchemaChange(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Raise(ctx, []string{"a"}, pos("0/400")); err != nil {
			t.Fatal(err)
		}
		if p := unknownAt(t, s); !p.Equal(pos("0/320")) {
			t.Fatalf("unknown-tables position %v after a plain raise, want 0/320", p)
		}
		if v := raise(t, s, []string{"a"}, "0/410", SchemaCheck{Done: []string{m3}}); v.Raised() {
			t.Fatalf("m3 ended by the raise: verdict %+v", v)
		}
	})

	t.Run("zero position", func(t *testing.T) {
		s := newStore("schema-zero")
		if _, err := s.BeginSchemaChange(ctx); err != nil {
			t.Fatal(err)
		}
		if v, err := s.RaiseChecked(ctx, []string{"a"}, Position{}, SchemaCheck{Check: true}); err != nil || v.Raised() {
			t.Fatalf("zero position: %+v, %v; want nothing", v, err)
		}
	})
}

// TestRedisSchemaKeys: the keys, their TTL, a lapsed mark, and a checked
// raise keeps the key signatures' rule.
func TestRedisSchemaKeys(t *testing.T) {
	_, rdb := redisClient(t)
	ctx := context.Background()
	db := uniqueDB("schema-keys")
	s := newTestRedis(rdb, RedisOptions{Database: db, TTL: time.Minute})
	base := "freshread:{" + db + "}-"
	if err := s.AdvanceSchema(ctx); err != nil {
		t.Fatal(err)
	}
	g1, err := rdb.Get(ctx, base+"ddl_gen").Result()
	if err != nil || !strings.HasSuffix(g1, ".1") {
		t.Fatalf("%sddl_gen = %q, %v; want <epoch>.1", base, g1, err)
	}
	if ttl := rdb.PTTL(ctx, base+"ddl_gen").Val(); ttl != -1 {
		t.Fatalf("ddl_gen TTL %v, want none (a generation that expired could come back equal)", ttl)
	}
	if err := s.AdvanceSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if g2 := rdb.Get(ctx, base+"ddl_gen").Val(); g2 != strings.TrimSuffix(g1, "1")+"2" {
		t.Fatalf("ddl_gen = %q after a second change, want %q's epoch at 2", g2, g1)
	}
	// A store that lost its data draws a new epoch: a generation read
	// before the loss never equals one after it.
	rdb.Del(ctx, base+"ddl_gen")
	if err := s.AdvanceSchema(ctx); err != nil {
		t.Fatal(err)
	}
	g3, _ := s.SchemaGeneration(ctx)
	if g3 == g1 || !strings.HasSuffix(g3, ".1") {
		t.Fatalf("generation %q after a loss and a change, want a new epoch (first was %q)", g3, g1)
	}
	m, err := s.BeginSchemaChange(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sc, err := rdb.ZScore(ctx, base+"ddl_pending", m).Result(); err != nil || sc <= float64(time.Now().Add(SchemaTTL-time.Minute).UnixMilli()) {
		t.Fatalf("mark %s scored %v, %v; want about now + %v", m, sc, err, SchemaTTL)
	}
	if ttl := rdb.PTTL(ctx, base+"ddl_pending").Val(); ttl <= SchemaTTL-time.Minute {
		t.Fatalf("ddl_pending TTL %v", ttl)
	}
	// A mark that lapsed (its process died) holds nothing up.
	rdb.ZAdd(ctx, base+"ddl_pending", redis.Z{Score: float64(time.Now().Add(-time.Second).UnixMilli()), Member: m})
	if v, err := s.RaiseChecked(ctx, []string{"a"}, mustPos(t, "0/20"), SchemaCheck{Graph: g3, Check: true}); err != nil || v.Raised() {
		t.Fatalf("lapsed mark: %+v, %v", v, err)
	}
	if n := rdb.ZCard(ctx, base+"ddl_pending").Val(); n != 0 {
		t.Fatalf("%d marks left, want the lapsed one dropped", n)
	}

	// Key signatures: a checked raise by another signature raises the
	// table's unkeyed position, as Raise does.
	if _, _, err := s.ClaimSignature(ctx, "t", "v1:id;"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RaiseChecked(ctx, []string{SignedKeyedTable("t", "v1:other;"), KeyName("t", "other", 1)}, mustPos(t, "0/30"), SchemaCheck{Graph: g3, Check: true}); err != nil {
		t.Fatal(err)
	}
	if p, err := s.WritePosition(ctx, []string{UnkeyedName("t")}); err != nil || !p.Equal(mustPos(t, "0/30")) {
		t.Fatalf("unkeyed t at %v, %v; want 0/30", p, err)
	}
	if sig := rdb.Get(ctx, base+SignatureName("t")+"-write_lsn").Val(); sig != "v1:id;" {
		t.Fatalf("signature %q, want the first kept", sig)
	}
}
