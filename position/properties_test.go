package position

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
)

var mariadbSamples = []string{
	"", "0-1-100", "0-2-100", "0-1-99", "0-1-100,1-2-50", "1-2-60", "0-1-90,1-2-50,2-3-7",
	"2-3-8", "0-0-0", "11-211-5,0-101-2320", "4294967295-1-18446744073709551615",
}

var mysqlSamples = []string{
	"", uuidA + ":1-100", uuidA + ":50-150", uuidA + ":1-100:200-300", uuidA + ":101-199",
	uuidA + ":7", uuidB + ":1-5", uuidA + ":1-100,\n" + uuidB + ":1-5,\n" + uuidC + ":1-2",
	uuidA + ":batch:1-5", uuidA + ":1-4:aaaa:1:bbbb:2-3", uuidC + ":9223372036854775807",
}

// TestMariaDBGTIDListProperties checks, on every pair and triple of samples,
// that Merge is a join for HasApplied: commutative, associative,
// idempotent, an upper bound of both, and the least one.
func TestMariaDBGTIDListProperties(t *testing.T) {
	var ls []MariaDBGTIDList
	for _, s := range mariadbSamples {
		ls = append(ls, mustMariaDB(t, s))
	}
	for _, a := range ls {
		if !a.HasApplied(a) || !a.Merge(a).Equal(a) || !a.HasApplied(MariaDBGTIDList{}) {
			t.Errorf("%q: not reflexive or Merge not idempotent", a)
		}
		for _, b := range ls {
			checkMariaDBPair(t, a, b)
			for _, c := range ls {
				if !a.Merge(b).Merge(c).Equal(a.Merge(b.Merge(c))) {
					t.Errorf("Merge not associative on %q, %q, %q", a, b, c)
				}
				if a.HasApplied(b) && b.HasApplied(c) && !a.HasApplied(c) {
					t.Errorf("HasApplied not transitive on %q, %q, %q", a, b, c)
				}
			}
		}
	}
}

func checkMariaDBPair(t *testing.T, a, b MariaDBGTIDList) {
	t.Helper()
	m := a.Merge(b)
	if !m.Equal(b.Merge(a)) {
		t.Errorf("Merge not commutative: %q, %q", a, b)
	}
	if !m.HasApplied(a) || !m.HasApplied(b) {
		t.Errorf("%q.Merge(%q) = %q has not applied both", a, b, m)
	}
	// a has applied b exactly when it has applied their merge.
	if a.HasApplied(b) != a.HasApplied(m) {
		t.Errorf("%q.HasApplied(%q) = %v but HasApplied(Merge) = %v", a, b, a.HasApplied(b), a.HasApplied(m))
	}
}

// TestMySQLGTIDSetProperties checks that Union is a join for Contains.
func TestMySQLGTIDSetProperties(t *testing.T) {
	var gs []MySQLGTIDSet
	for _, s := range mysqlSamples {
		gs = append(gs, mustMySQL(t, s))
	}
	for _, a := range gs {
		if !a.Contains(a) || !a.Union(a).Equal(a) || !a.Contains(MySQLGTIDSet{}) {
			t.Errorf("%q: not reflexive or Union not idempotent", a)
		}
		for _, b := range gs {
			checkMySQLPair(t, a, b)
			for _, c := range gs {
				if !a.Union(b).Union(c).Equal(a.Union(b.Union(c))) {
					t.Errorf("Union not associative on %q, %q, %q", a, b, c)
				}
			}
		}
	}
}

func checkMySQLPair(t *testing.T, a, b MySQLGTIDSet) {
	t.Helper()
	u := a.Union(b)
	if !u.Equal(b.Union(a)) {
		t.Errorf("Union not commutative: %q, %q", a, b)
	}
	if !u.Contains(a) || !u.Contains(b) {
		t.Errorf("%q.Union(%q) = %q does not contain both", a, b, u)
	}
	if a.Contains(b) != u.Equal(a) {
		t.Errorf("%q.Contains(%q) = %v but Union equal = %v", a, b, a.Contains(b), u.Equal(a))
	}
	if a.Contains(b) && b.Contains(a) != a.Equal(b) {
		t.Errorf("%q and %q contain each other but are not Equal", a, b)
	}
}

// gtidModel is a GTID set spelled out: "uuid:tag" -> numbers.
type gtidModel map[string]map[uint64]bool

func (m gtidModel) add(key string, n uint64) {
	if m[key] == nil {
		m[key] = map[uint64]bool{}
	}
	m[key][n] = true
}

func (m gtidModel) subsetOf(o gtidModel) bool {
	for k, ns := range m {
		for n := range ns {
			if !o[k][n] {
				return false
			}
		}
	}
	return true
}

func modelOf(g MySQLGTIDSet) gtidModel {
	m := gtidModel{}
	for _, ts := range g.sets {
		key := string(appendUUID(nil, ts.key.uuid)) + ":" + ts.key.tag
		for _, iv := range ts.ivs {
			for n := iv.first; n <= iv.last; n++ {
				m.add(key, n)
			}
		}
	}
	return m
}

func modelsEqual(a, b gtidModel) bool {
	return maps.EqualFunc(a, b, func(x, y map[uint64]bool) bool { return maps.Equal(x, y) })
}

// randomMySQL writes a random GTID set as a user or MySQL might (any
// order, any case, overlapping ranges, sources repeated, ",\n" separators)
// and returns it with its model.
func randomMySQL(r *rand.Rand) (string, gtidModel) {
	uuids := []string{uuidA, uuidB, uuidC}
	tags := []string{"", "a", "B", "_t1"}
	m := gtidModel{}
	var entries []string
	for range r.IntN(5) {
		u := uuids[r.IntN(len(uuids))]
		if r.IntN(2) == 0 {
			u = strings.ToUpper(u)
		}
		entry, tag := u, ""
		for range 1 + r.IntN(3) {
			// Ranges belong to the last tag written, if any.
			if next := tags[r.IntN(len(tags))]; next != "" {
				tag = next
				entry += ":" + tag
			}
			for range 1 + r.IntN(3) {
				first := 1 + uint64(r.IntN(30))
				last := first + uint64(r.IntN(8))
				if r.IntN(3) == 0 {
					last = first
					entry += fmt.Sprintf(":%d", first)
				} else {
					entry += fmt.Sprintf(":%d-%d", first, last)
				}
				for n := first; n <= last; n++ {
					m.add(strings.ToLower(u)+":"+strings.ToLower(tag), n)
				}
			}
		}
		entries = append(entries, entry)
	}
	seps := []string{",", ",\n", ", ", " ,\r\n"}
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteString(seps[r.IntN(len(seps))])
		}
		b.WriteString(e)
	}
	return b.String(), m
}

// TestMySQLGTIDSetModel compares parsing, Contains and Union on random sets
// with the same operations on the sets spelled out number by number.
func TestMySQLGTIDSetModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		sa, ma := randomMySQL(r)
		sb, mb := randomMySQL(r)
		a, b := mustMySQL(t, sa), mustMySQL(t, sb)
		if !modelsEqual(modelOf(a), ma) {
			t.Fatalf("ParseMySQLGTIDSet(%q) = %q, which is not the set written", sa, a)
		}
		if again := mustMySQL(t, a.String()); !again.Equal(a) || again.String() != a.String() {
			t.Fatalf("%q does not re-parse to itself", a)
		}
		if got, want := a.Contains(b), mb.subsetOf(ma); got != want {
			t.Fatalf("%q.Contains(%q) = %v, want %v", a, b, got, want)
		}
		union := gtidModel{}
		for _, m := range []gtidModel{ma, mb} {
			for k, ns := range m {
				for n := range ns {
					union.add(k, n)
				}
			}
		}
		if u := a.Union(b); !modelsEqual(modelOf(u), union) {
			t.Fatalf("%q.Union(%q) = %q, not the union", a, b, u)
		}
		checkMySQLPair(t, a, b)
	}
}

// TestMariaDBGTIDListModel compares HasApplied and Merge on random lists
// with a map of domains.
func TestMariaDBGTIDListModel(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	random := func() (string, map[uint32]mariadbGTID) {
		m := map[uint32]mariadbGTID{}
		var entries []string
		for _, d := range r.Perm(5)[:r.IntN(6)] {
			g := mariadbGTID{domain: uint32(d), server: uint32(1 + r.IntN(3)), seq: uint64(r.IntN(12))}
			m[g.domain] = g
			entries = append(entries, fmt.Sprintf("%d-%d-%d", g.domain, g.server, g.seq))
		}
		return strings.Join(entries, ","), m
	}
	for range 3000 {
		sa, ma := random()
		sb, mb := random()
		a, b := mustMariaDB(t, sa), mustMariaDB(t, sb)
		want := true
		for d, g := range mb {
			if ma[d].seq < g.seq || ma[d] == (mariadbGTID{}) {
				want = false
			}
		}
		if got := a.HasApplied(b); got != want {
			t.Fatalf("%q.HasApplied(%q) = %v, want %v", sa, sb, got, want)
		}
		m := a.Merge(b)
		for d := range uint32(5) {
			ga, okA := ma[d]
			gb, okB := mb[d]
			seq, ok := m.Seq(d)
			if ok != (okA || okB) || seq != max(ga.seq, gb.seq) {
				t.Fatalf("%q.Merge(%q) = %q: domain %d wrong", sa, sb, m, d)
			}
		}
		checkMariaDBPair(t, a, b)
	}
}
