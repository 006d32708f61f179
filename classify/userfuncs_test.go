package classify

import "testing"

// TestCallsUserFunctions: a call of a user function declared read-only is
// reported (its body may read any table), on both dialects, through
// TiDB's parser and MySQL's token-level fallback alike; built-ins and
// undeclared functions are not.
func TestCallsUserFunctions(t *testing.T) {
	cases := []struct {
		d    Dialect
		sql  string
		kind Kind
		want bool
	}{
		{Postgres, "SELECT f(1) FROM t", Read, true},
		{Postgres, "SELECT id FROM t WHERE x = App.G(2)", Read, true},
		{Postgres, `SELECT "f"(1)`, Read, true},
		{Postgres, "SELECT * FROM t WHERE id IN (SELECT f(id) FROM u)", Read, true},
		{Postgres, "SELECT 1 WHERE (id = NULL AND f(NULL) = 8)", Read, true},
		{Postgres, "UPDATE t SET x = f(1)", Write, true},
		{Postgres, "SELECT count(*), lower(name), coalesce(a, 0) FROM t", Read, false},
		{Postgres, "SELECT h(1)", Write, false},
		{Postgres, "SELECT g(1)", Write, false}, // only app.g is declared
		{MySQL, "SELECT f(1) FROM t", Read, true},
		{MySQL, "SELECT 1 FROM DUAL WHERE (id = NULL AND app.g(NULL) = 8)", Read, true},
		{MySQL, "SELECT * FROM t WHERE id IN (SELECT f(id) FROM u)", Read, true},
		{MySQL, "SELECT /*M! 1, */ f(1) FROM t", Read, true}, // the token-level analyzer
		{MySQL, "UPDATE t SET x = f(1)", Write, true},
		{MySQL, "SELECT count(*), lower(name), ifnull(a, 0) FROM t", Read, false},
		{MySQL, "SELECT h(1)", Write, false},
	}
	for _, cache := range []int{-1, 0} {
		cs := map[Dialect]*Classifier{}
		for _, d := range []Dialect{Postgres, MySQL} {
			cs[d] = New(Config{Dialect: d, ReadOnlyFunctions: []string{"f", "app.g"}, CacheSize: cache})
		}
		for _, c := range cases {
			for range 2 { // the second from the cache, when there is one
				r := cs[c.d].Classify(c.sql)
				if r.Kind != c.kind || r.CallsUserFunctions != c.want {
					t.Errorf("%v %q: kind %v, CallsUserFunctions %v; want %v, %v (reason %q)", c.d, c.sql, r.Kind, r.CallsUserFunctions, c.kind, c.want, r.Reason)
				}
			}
		}
	}
	// Nothing declared: the call is an unknown function, a write.
	for _, d := range []Dialect{Postgres, MySQL} {
		if r := New(Config{Dialect: d}).Classify("SELECT f(1) FROM t"); r.Kind != Write || r.CallsUserFunctions {
			t.Errorf("%v undeclared f: %+v", d, r)
		}
	}
}

// TestMySQLFallbackDual: FROM DUAL reads no table, also in the token-level
// analyzer (text TiDB's parser rejects).
func TestMySQLFallbackDual(t *testing.T) {
	c := New(Config{Dialect: MySQL})
	for _, sql := range []string{"SELECT 1 FROM DUAL WHERE (id = 1)", `SELECT 1 FROM DUAL WHERE ("f"(id) = 1)`, "SELECT /*M! 1, */ 2 FROM dual"} {
		if r := c.Classify(sql); r.Kind != Read || len(r.Reads) != 0 {
			t.Errorf("%q: %+v, want a read of no table", sql, r)
		}
	}
}
