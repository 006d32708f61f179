package lsnstore

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
)

func testDependents(t *testing.T, s DependentsStore) {
	ctx := context.Background()
	d, err := s.Dependents(ctx)
	if err != nil || d.Graph != nil || d.Version != "" || !d.Published.IsZero() {
		t.Fatalf("empty store: Dependents = %+v, %v; want empty", d, err)
	}
	if v, err := s.DependentsVersion(ctx); err != nil || v != "" {
		t.Fatalf("empty store: DependentsVersion = %q, %v", v, err)
	}
	g1 := map[string][]string{
		"a":     {"c", "b", "b", "a"}, // unsorted, duplicate, self-edge
		"b":     {"c"},
		"empty": nil,
		"dyn":   {Everything},
	}
	if err := s.PublishDependents(ctx, g1); err != nil {
		t.Fatal(err)
	}
	d, err = s.Dependents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"a": {"b", "c"}, "b": {"c"}, "dyn": {"*"}}
	if !reflect.DeepEqual(d.Graph, want) {
		t.Fatalf("Graph = %v; want %v", d.Graph, want)
	}
	if d.Version == "" || d.Published.IsZero() {
		t.Fatalf("Version %q, Published %v: want both set", d.Version, d.Published)
	}
	v1 := d.Version
	if v, _ := s.DependentsVersion(ctx); v != v1 {
		t.Fatalf("DependentsVersion = %q; want %q", v, v1)
	}
	deps, every := d.Expand([]string{"a"})
	if !reflect.DeepEqual(deps, []string{"b", "c"}) || every {
		t.Fatalf("Expand(a) = %v, %v", deps, every)
	}
	if _, every := d.Expand([]string{"x", "dyn"}); !every {
		t.Fatal("Expand(dyn): want everything")
	}
	// The caller owns the map.
	d.Graph["a"][0] = "mutated"
	if d2, _ := s.Dependents(ctx); d2.Graph["a"][0] != "b" {
		t.Fatal("Dependents returned a shared map")
	}
	// Same content: same version.
	if err := s.PublishDependents(ctx, map[string][]string{"b": {"c"}, "a": {"b", "c"}, "dyn": {"*"}}); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.DependentsVersion(ctx); v != v1 {
		t.Fatalf("unchanged graph: version %q; want %q", v, v1)
	}
	// A smaller graph replaces the old one entirely.
	if err := s.PublishDependents(ctx, map[string][]string{"b": {"d"}}); err != nil {
		t.Fatal(err)
	}
	d, _ = s.Dependents(ctx)
	if !reflect.DeepEqual(d.Graph, map[string][]string{"b": {"d"}}) || d.Version == v1 {
		t.Fatalf("after replacement: %+v", d)
	}
	// And an empty one empties it.
	if err := s.PublishDependents(ctx, nil); err != nil {
		t.Fatal(err)
	}
	d, _ = s.Dependents(ctx)
	if len(d.Graph) != 0 || d.Version == "" {
		t.Fatalf("after empty publication: %+v", d)
	}
}

func TestMemoryDependents(t *testing.T) { testDependents(t, NewMemory()) }

func TestRedisDependents(t *testing.T) {
	_, rdb := redisClient(t)
	db := uniqueDB("deps")
	s := newTestRedis(rdb, RedisOptions{Database: db})
	testDependents(t, s)

	// Key layout: per-table keys hold the JSON list, and leave with the table.
	ctx := context.Background()
	if err := s.PublishDependents(ctx, map[string][]string{"orders": {"order_totals", "*"}}); err != nil {
		t.Fatal(err)
	}
	raw, err := rdb.Get(ctx, "freshread:{"+db+"}-orders-dependents").Result()
	if err != nil {
		t.Fatal(err)
	}
	var l []string
	if err := json.Unmarshal([]byte(raw), &l); err != nil || !reflect.DeepEqual(l, []string{"*", "order_totals"}) {
		t.Fatalf("orders-dependents = %q (%v)", raw, err)
	}
	if ttl := rdb.TTL(ctx, "freshread:{"+db+"}-orders-dependents").Val(); ttl >= 0 {
		t.Fatalf("dependents key has TTL %v; want none", ttl)
	}
	if err := s.PublishDependents(ctx, map[string][]string{"x": {"y"}}); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, "freshread:{"+db+"}-orders-dependents").Val(); n != 0 {
		t.Fatal("orders-dependents survived a publication without orders")
	}
	// A second store on the same database sees the graph.
	d, err := newTestRedis(rdb, RedisOptions{Database: db}).Dependents(ctx)
	if err != nil || !reflect.DeepEqual(d.Graph, map[string][]string{"x": {"y"}}) {
		t.Fatalf("second store: %+v, %v", d, err)
	}
}
