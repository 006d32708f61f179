package plugin

import (
	"slices"
	"sort"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/classify"
)

func TestScanFragment(t *testing.T) {
	const (
		none = fragmentScan(0)
		sub  = scanSubquery
		call = scanCall
	)
	cases := []struct {
		sql  string
		d    classify.Dialect
		want fragmentScan
	}{
		{"id = ?", classify.Postgres, none},
		{"id IN (?) AND x = ANY(?) AND NOT EXISTS (?)", classify.Postgres, none},
		{"count(*)", classify.Postgres, none},
		{"COUNT(DISTINCT(name))", classify.MySQL, none},
		{"lower(name) = ? AND coalesce(total, 0) > 1", classify.Postgres, none},
		{"CAST(x AS numeric(10, 2)) > 1 AND y::varchar(3) = 'a'", classify.Postgres, none},
		{"sum(total) OVER (PARTITION BY customer_id)", classify.Postgres, none},
		{"ifnull(a, 0) = 1", classify.MySQL, none},
		{"ifnull(a, 0) = 1", classify.Postgres, call}, // not a PostgreSQL built-in: a user's function could be
		{"date_trunc('day', ts)", classify.MySQL, call},
		{"f(7) AS v", classify.Postgres, call},
		{"id = ? AND f (8) = 8", classify.Postgres, call},
		{"public.lower(x)", classify.Postgres, call},
		{`"public" . "f"(1)`, classify.Postgres, call},
		{"`f`(1)", classify.MySQL, call},
		{"name = 'f(1)'", classify.Postgres, none},
		{`"f(1)" = 1`, classify.Postgres, none},
		{"name = 'it''s' AND g(1)", classify.Postgres, call},
		{"(SELECT count(*) FROM items) AS n", classify.Postgres, sub},
		{"x IN (TABLE t)", classify.Postgres, sub},
		{"selected = true AND table_name = 'x'", classify.Postgres, none},
		{"name = 'select'", classify.Postgres, none},
		// What the scan cannot follow is scanned blind to quotes.
		{`name = 'a\' AND f(1) = 1 -- '`, classify.Postgres, call},
		{"x = 1 -- it's\n AND f(1) = 1", classify.Postgres, call},
		{"x = 1 /* it's */", classify.Postgres, none},
		{"x = $$ f(1) $$", classify.Postgres, call},
		{"name = 'unterminated", classify.Postgres, none},
	}
	for _, c := range cases {
		if got := scanFragment(c.sql, c.d); got != c.want {
			t.Errorf("%v %q: %b, want %b", c.d, c.sql, got, c.want)
		}
	}
}

// TestWalkStatementFragments: which GORM reads are writes (text written by
// hand calls a function that writes), which may read rows other than
// those they pin (opaque: not keyed) and which are plain, on both
// dialects' classifiers.
func TestWalkStatementFragments(t *testing.T) {
	db := dryDB(t)
	type want struct {
		write, opaque, known, locks bool
		tables                      []string // when known
	}
	plain := want{known: true, tables: []string{"orders"}}
	opaque := want{opaque: true, known: true, tables: []string{"orders"}}
	write := want{write: true, opaque: true}
	unknown := want{opaque: true}
	cases := []struct {
		name  string
		query func(*gorm.DB) *gorm.DB
		want  want
	}{
		{"pinned", func(d *gorm.DB) *gorm.DB { return d.Model(&Order{}).Where("id = ?", 1) }, plain},
		{"count", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Where("id = ?", 1).Select("count(*)")
		}, plain},
		{"immutable built-ins", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Select("id, lower(name) AS n, coalesce(total, 0) AS t").
				Where("id = ? AND abs(total) > ?", 1, 2).Order("upper(name)").Group("id").Having("max(total) > 1")
		}, plain},
		{"select calls a function", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Select("id, f(7) AS v").Where("id = ?", 1)
		}, write},
		{"select expression calls a function", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Select("id, f(?) AS v", 7).Where("id = ?", 1)
		}, write},
		{"condition calls a function", func(d *gorm.DB) *gorm.DB { return d.Model(&Order{}).Where("id = ? AND f(8) = 8", 1) }, write},
		{"order calls a function", func(d *gorm.DB) *gorm.DB { return d.Model(&Order{}).Where("id = ?", 1).Order("f(id)") }, write},
		{"group calls a function", func(d *gorm.DB) *gorm.DB { return d.Model(&Order{}).Group("f(id)") }, write},
		{"having calls a function", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Group("customer_id").Having("f(count(*)) > 1")
		}, write},
		{"raw join calls a function", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Joins("JOIN payments p ON p.order_id = orders.id AND f(p.id) = 1")
		}, write},
		{"raw join then a function", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Joins("JOIN payments p ON p.order_id = orders.id").Where("f(1) = 1")
		}, write},
		{"clause expression calls a function", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Clauses(clause.Expr{SQL: "f(?) = 1", Vars: []any{1}})
		}, write},
		{"value expression calls a function", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Where("total = ?", gorm.Expr("f(1)"))
		}, write},
		{"subquery calls a function", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Where("id IN (?)", d.Model(&Payment{}).Select("order_id").Where("f(id) = 1"))
		}, write},
		{"sequence", func(d *gorm.DB) *gorm.DB { return d.Model(&Order{}).Where("id = nextval('s')") }, write},
		{"quoted function", func(d *gorm.DB) *gorm.DB { return d.Model(&Order{}).Where(`"f"(id) = 1`) }, write},
		{"backquoted function", func(d *gorm.DB) *gorm.DB { return d.Model(&Order{}).Where("`f`(id) = 1") }, write},
		{"string is no call", func(d *gorm.DB) *gorm.DB { return d.Model(&Order{}).Where("id = ? AND name = 'f(1)'", 1) }, plain},
		// Read-only functions (declared g) and subqueries read other rows.
		{"read-only user function", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Select("id, g(1) AS n").Where("id = ?", 1)
		}, unknown},
		{"read-only user function in a condition", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Where("id = ? AND g(id) > 0", 1)
		}, unknown},
		{"select subquery", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Where("id = ?", 1).Select("id, (SELECT count(*) FROM orders) AS n")
		}, want{opaque: true, known: true, tables: []string{"orders"}}},
		{"condition subquery", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Where("id = ? AND total > (SELECT avg(total) FROM payments)", 1)
		}, want{opaque: true, known: true, tables: []string{"orders", "payments"}}},
		{"GORM subquery", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Where("id = ?", 1).Where("total > (?)", d.Model(&Order{}).Select("avg(total)"))
		}, opaque},
		{"lateral", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Where("id = ?", 1).Joins("CROSS JOIN LATERAL (SELECT 1) x")
		}, unknown},
		{"read-only built-in", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Where("id = ? AND to_hex(total) = ?", 1, "1")
		}, opaque},
		{"locking subquery", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Where("id IN (SELECT order_id FROM payments FOR UPDATE)")
		}, want{opaque: true, locks: true}},
	}
	for _, d := range []classify.Dialect{classify.Postgres, classify.MySQL} {
		cls := classify.New(classify.Config{Dialect: d, ReadOnlyFunctions: []string{"g"}})
		for _, c := range cases {
			t.Run(d.String()+"/"+c.name, func(t *testing.T) {
				w := c.want
				if d == classify.MySQL && c.name == "read-only built-in" {
					w = write // to_hex is no MySQL built-in
				}
				if d == classify.Postgres && c.name == "backquoted function" {
					w = opaque // a syntax error on the server: sent nowhere
				}
				if d == classify.MySQL && c.name == "quoted function" {
					w = opaque // a string there, unless ANSI_QUOTES: as the classifier reads raw SQL
				}
				if d == classify.MySQL && c.name == "sequence" {
					w = write // unparseable there, and calls a function
				}
				stmt := c.query(db.Session(&gorm.Session{})).Statement
				if stmt.Model != nil {
					if err := stmt.Parse(stmt.Model); err != nil {
						t.Fatal(err)
					}
				}
				got := walkStatement(stmt, cls)
				if got.write != w.write || got.opaque != w.opaque || got.known != w.known || got.locks != w.locks {
					t.Fatalf("write %v opaque %v known %v locks %v (tables %v); want write %v opaque %v known %v locks %v",
						got.write, got.opaque, got.known, got.locks, got.tables, w.write, w.opaque, w.known, w.locks)
				}
				if w.known {
					tables := slices.Clone(got.tables)
					sort.Strings(tables)
					tables = slices.Compact(tables)
					if !slices.Equal(tables, w.tables) {
						t.Fatalf("tables %v, want %v", tables, w.tables)
					}
				}
			})
		}
	}
}

// BenchmarkWalkStatement is the walk of BenchmarkRoute's read (a key
// condition, no function) and of one calling built-ins GORM and users
// write (count, lower): the cheap scan only, no classification.
func BenchmarkWalkStatement(b *testing.B) {
	db, cls := dryDB(b), classify.New(classify.Config{Dialect: classify.Postgres})
	for _, c := range []struct {
		name  string
		query func(*gorm.DB) *gorm.DB
	}{
		{"key", func(d *gorm.DB) *gorm.DB { return d.Model(&Order{}).Where("id = ?", 1).Limit(1) }},
		{"built-ins", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Select("count(*), lower(name)").Where("id = ? AND coalesce(total, 0) > ?", 1, 0)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			stmt := c.query(db.Session(&gorm.Session{})).Statement
			if err := stmt.Parse(stmt.Model); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if w := walkStatement(stmt, cls); w.opaque || !w.known {
					b.Fatalf("%+v", w)
				}
			}
		})
	}
}
