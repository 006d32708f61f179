package lsnstore

import (
	"context"
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
// to its own position, and says so, exactly when the schema position is
// not strictly below the caller's graph position or a schema change is
// under way; and it still raises what Raise raises.
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
	check := func(g string) SchemaCheck { return SchemaCheck{Graph: pos(g), Check: true} }

	t.Run("no schema change", func(t *testing.T) {
		s := newStore("schema-none")
		if v := raise(t, s, []string{"a"}, "0/50", check("0/10")); v.Raised() {
			t.Fatalf("verdict %+v without a schema position", v)
		}
		if v := raise(t, s, []string{"a"}, "0/60", SchemaCheck{Check: true}); v.Raised() {
			t.Fatalf("verdict %+v for a zero graph without a schema position", v)
		}
		if p := unknownAt(t, s); !p.IsZero() {
			t.Fatalf("unknown-tables position %v, want none", p)
		}
		if p, _ := s.WritePosition(ctx, []string{"a"}); !p.Equal(pos("0/60")) {
			t.Fatalf("a at %v, want 0/60", p)
		}
	})

	t.Run("schema position against the graph", func(t *testing.T) {
		s := newStore("schema-graph")
		if err := s.RaiseSchema(ctx, pos("0/100")); err != nil {
			t.Fatal(err)
		}
		if p, err := s.SchemaPosition(ctx); err != nil || !p.Equal(pos("0/100")) {
			t.Fatalf("SchemaPosition = %v, %v; want 0/100", p, err)
		}
		// A graph learned past the change: nothing more.
		if v := raise(t, s, []string{"a"}, "0/120", check("0/101")); v.Raised() {
			t.Fatalf("graph past the change: verdict %+v", v)
		}
		if p := unknownAt(t, s); !p.IsZero() {
			t.Fatalf("unknown-tables position %v after a current graph's raise", p)
		}
		// Not checked: nothing more.
		if v := raise(t, s, []string{"a"}, "0/130", SchemaCheck{Graph: pos("0/50")}); v.Raised() {
			t.Fatalf("unchecked: verdict %+v", v)
		}
		// Older, equal, or zero: stale, and the unknown-tables position is
		// raised to the write's position.
		for i, g := range []string{"0/50", "0/100", "0/0"} {
			w := []string{"0/140", "0/150", "0/160"}[i]
			if v := raise(t, s, []string{"a"}, w, check(g)); !v.Stale || v.Pending {
				t.Fatalf("graph at %s, schema at 0/100: verdict %+v, want stale", g, v)
			}
			if p := unknownAt(t, s); !p.Equal(pos(w)) {
				t.Fatalf("graph at %s: unknown-tables position %v, want %s", g, p, w)
			}
		}
		// A raise of unknown tables is checked too.
		if v := raise(t, s, nil, "0/170", check("0/60")); !v.Stale {
			t.Fatalf("unknown tables, old graph: verdict %+v", v)
		}
		if p, _ := s.WritePosition(ctx, []string{"a"}); !p.Equal(pos("0/170")) {
			t.Fatalf("a at %v, want 0/170", p)
		}
		// The schema position only grows.
		if err := s.RaiseSchema(ctx, pos("0/90")); err != nil {
			t.Fatal(err)
		}
		if p, _ := s.SchemaPosition(ctx); !p.Equal(pos("0/100")) {
			t.Fatalf("SchemaPosition %v after a lower raise, want 0/100", p)
		}
	})

	t.Run("lanes", func(t *testing.T) {
		s := newStore("schema-lanes")
		if err := s.RaiseSchema(ctx, pos("0/0+1=0/10+2=0/5")); err != nil {
			t.Fatal(err)
		}
		// Past in every lane of the change, and in one strictly.
		if v := raise(t, s, []string{"a"}, "0/0+1=0/20", check("0/0+1=0/10+2=0/6")); v.Raised() {
			t.Fatalf("graph past the change: verdict %+v", v)
		}
		if v := raise(t, s, []string{"a"}, "0/0+1=0/20", check("0/0+1=0/10+2=0/5+3=0/1")); v.Raised() {
			t.Fatalf("graph past the change in another lane: verdict %+v", v)
		}
		for _, g := range []string{"0/0+1=0/11", "0/0+1=0/10+2=0/5", "0/0+1=0/9+2=0/9"} {
			if v := raise(t, s, []string{"a"}, "0/0+1=0/30", check(g)); !v.Stale {
				t.Fatalf("graph at %s, change at 0/0+1=0/10+2=0/5: verdict %+v, want stale", g, v)
			}
		}
		if p := unknownAt(t, s); !p.Equal(pos("0/0+1=0/30")) {
			t.Fatalf("unknown-tables position %v", p)
		}
	})

	t.Run("a raise that publishes a change", func(t *testing.T) {
		s := newStore("schema-changed")
		// The change's own raise: its graph predates it.
		if v := raise(t, s, []string{"a"}, "0/200", SchemaCheck{Graph: pos("0/150"), Check: true, Changed: true}); !v.Stale {
			t.Fatalf("the change's raise: verdict %+v, want stale", v)
		}
		if p, _ := s.SchemaPosition(ctx); !p.Equal(pos("0/200")) {
			t.Fatalf("SchemaPosition %v, want 0/200", p)
		}
		if v := raise(t, s, []string{"b"}, "0/210", check("0/199")); !v.Stale {
			t.Fatalf("graph before the change: verdict %+v", v)
		}
		if v := raise(t, s, []string{"b"}, "0/220", check("0/201")); v.Raised() {
			t.Fatalf("graph past the change: verdict %+v", v)
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
		if v := raise(t, s, []string{"a"}, "0/300", check("0/1000")); !v.Pending || v.Stale {
			t.Fatalf("under way: verdict %+v, want pending", v)
		}
		if p := unknownAt(t, s); !p.Equal(pos("0/300")) {
			t.Fatalf("unknown-tables position %v, want 0/300", p)
		}
		if v := raise(t, s, []string{"a"}, "0/310", SchemaCheck{}); !v.Pending {
			t.Fatalf("under way, unchecked graph: verdict %+v, want pending", v)
		}
		// The raise that publishes m1 ends it; m2 is still under way.
		if v := raise(t, s, []string{"a"}, "0/320", SchemaCheck{Graph: pos("0/1000"), Check: true, Changed: true, Done: []string{m1}}); !v.Pending || v.Stale {
			t.Fatalf("m1 published, m2 under way: verdict %+v", v)
		}
		if err := s.EndSchemaChanges(ctx, []string{m2}); err != nil {
			t.Fatal(err)
		}
		// The graph at 0/1000 is past the change at 0/320.
		if v := raise(t, s, []string{"a"}, "0/330", check("0/1000")); v.Raised() {
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
	if err := s.RaiseSchema(ctx, mustPos(t, "0/10")); err != nil {
		t.Fatal(err)
	}
	if v, err := rdb.Get(ctx, base+"ddl_lsn").Result(); err != nil || v != "0/10" {
		t.Fatalf("%sddl_lsn = %q, %v", base, v, err)
	}
	if ttl := rdb.PTTL(ctx, base+"ddl_lsn").Val(); ttl <= SchemaTTL-time.Minute || ttl > SchemaTTL {
		t.Fatalf("ddl_lsn TTL %v, want about %v", ttl, SchemaTTL)
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
	if v, err := s.RaiseChecked(ctx, []string{"a"}, mustPos(t, "0/20"), SchemaCheck{Graph: mustPos(t, "0/11"), Check: true}); err != nil || v.Raised() {
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
	if _, err := s.RaiseChecked(ctx, []string{SignedKeyedTable("t", "v1:other;"), KeyName("t", "other", 1)}, mustPos(t, "0/30"), SchemaCheck{Graph: mustPos(t, "0/11"), Check: true}); err != nil {
		t.Fatal(err)
	}
	if p, err := s.WritePosition(ctx, []string{UnkeyedName("t")}); err != nil || !p.Equal(mustPos(t, "0/30")) {
		t.Fatalf("unkeyed t at %v, %v; want 0/30", p, err)
	}
	if sig := rdb.Get(ctx, base+SignatureName("t")+"-write_lsn").Val(); sig != "v1:id;" {
		t.Fatalf("signature %q, want the first kept", sig)
	}
}
