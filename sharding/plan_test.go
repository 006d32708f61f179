package sharding

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

func span(first, last int) []int {
	var out []int
	for b := first; b <= last; b++ {
		out = append(out, b)
	}
	return out
}

func TestMapFromAlgorithm(t *testing.T) {
	m, err := MapFromAlgorithm(EvenBuckets(8, "a", "b"), []string{"a", "b"}, map[int64]string{42: "b"})
	if err != nil {
		t.Fatal(err)
	}
	want := BucketMap{Owners: []string{"a", "a", "a", "a", "b", "b", "b", "b"}, HotUsers: map[int64]string{42: "b"}}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("%+v, want %+v", m, want)
	}
	m, err = MapFromAlgorithm(Mod(3), []string{"x", "y", "z"}, nil)
	if err != nil || !slices.Equal(m.Owners, []string{"x", "y", "z"}) || m.HotUsers != nil {
		t.Fatalf("Mod(3): %+v, %v", m, err)
	}
	if _, err := MapFromAlgorithm(EvenBuckets(8, "a"), []string{"a"}, map[int64]string{1: "q"}); !errors.Is(err, ErrUnknownShard) {
		t.Fatalf("unknown hot shard: %v", err)
	}
	if _, err := MapFromAlgorithm(VirtualBuckets(4, BucketRange{0, 3, "q"}), []string{"a"}, nil); !errors.Is(err, ErrUnknownShard) {
		t.Fatalf("unknown range shard: %v", err)
	}
	if _, err := MapFromAlgorithm(Mod(2), []string{"a"}, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("Mod(2) over one shard: %v", err)
	}
}

func TestPlanDoubling(t *testing.T) {
	m, err := MapFromAlgorithm(EvenBuckets(1024, "s0", "s1", "s2", "s3"), []string{"s0", "s1", "s2", "s3"}, map[int64]string{7: "s2"})
	if err != nil {
		t.Fatal(err)
	}
	m.Version = 4
	moves, next, err := PlanDoubling(m, []string{"s4", "s5", "s6", "s7"})
	if err != nil {
		t.Fatal(err)
	}
	want := []PlannedMove{
		{From: "s0", To: "s4", Buckets: span(128, 255)},
		{From: "s1", To: "s5", Buckets: span(384, 511)},
		{From: "s2", To: "s6", Buckets: span(640, 767)},
		{From: "s3", To: "s7", Buckets: span(896, 1023)},
	}
	if !reflect.DeepEqual(moves, want) {
		t.Fatalf("moves %+v", moves)
	}
	if next.Version != 4 || next.HotUsers[7] != "s2" || m.Owners[200] != "s0" {
		t.Fatalf("next version %d, hot %v; the input changed: %v", next.Version, next.HotUsers, m.Owners[200] != "s0")
	}
	for b, o := range next.Owners {
		w := []string{"s0", "s4", "s1", "s5", "s2", "s6", "s3", "s7"}[b/128]
		if o != w {
			t.Fatalf("bucket %d on %s, want %s", b, o, w)
		}
	}
	// Doubling again: 8 -> 16, shards taken in the order of their first
	// bucket (s0, s4, s1, s5, ...).
	moves2, next2, err := PlanDoubling(next, []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"})
	if err != nil {
		t.Fatal(err)
	}
	if moves2[1].From != "s4" || moves2[1].To != "t1" || !slices.Equal(moves2[1].Buckets, span(192, 255)) {
		t.Fatalf("second move %+v", moves2[1])
	}
	if len(next2.Shards()) != 16 {
		t.Fatalf("%d shards after two doublings", len(next2.Shards()))
	}

	// A shard with two ranges gives the upper half of each; odd ranges
	// keep the larger half.
	m3 := BucketMap{Owners: []string{"a", "a", "a", "b", "b", "a", "a", "a", "a", "a"}}
	moves3, next3, err := PlanDoubling(m3, []string{"c", "d"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(moves3, []PlannedMove{{"a", "c", []int{2, 8, 9}}, {"b", "d", []int{4}}}) {
		t.Fatalf("moves %+v", moves3)
	}
	if !slices.Equal(next3.Owners, []string{"a", "a", "c", "b", "d", "a", "a", "a", "c", "c"}) {
		t.Fatalf("owners %v", next3.Owners)
	}

	for _, tc := range []struct {
		name string
		m    BucketMap
		news []string
	}{
		{"too few new shards", m, []string{"s4"}},
		{"new shard already there", m, []string{"s4", "s5", "s6", "s3"}},
		{"hot shard", BucketMap{Owners: []string{"a", "a"}, HotUsers: map[int64]string{1: "h"}}, []string{"h"}},
		{"repeated", BucketMap{Owners: []string{"a", "a", "b", "b"}}, []string{"c", "c"}},
		{"single buckets", BucketMap{Owners: []string{"a", "b", "a"}}, []string{"c", "d"}},
		{"empty", BucketMap{}, nil},
	} {
		if _, _, err := PlanDoubling(tc.m, tc.news); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func TestBucketMapApply(t *testing.T) {
	m := BucketMap{Version: 2, Owners: []string{"a", "a", "b"}}
	n, err := m.Apply(PlannedMove{From: "a", To: "c", Buckets: []int{1}})
	if err != nil || !slices.Equal(n.Owners, []string{"a", "c", "b"}) || n.Version != 2 || m.Owners[1] != "a" {
		t.Fatalf("%+v %v (input %v)", n, err, m.Owners)
	}
	for _, mv := range []PlannedMove{
		{From: "b", To: "c", Buckets: []int{0}},
		{From: "a", To: "c", Buckets: []int{3}},
		{From: "a", To: "a", Buckets: []int{0}},
		{From: "a", To: "", Buckets: []int{0}},
	} {
		if _, err := m.Apply(mv); err == nil {
			t.Errorf("%+v: no error", mv)
		}
	}
}
