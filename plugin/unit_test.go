package plugin

import (
	"database/sql"
	"reflect"
	"slices"
	"sort"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/lsnstore"
)

func TestIdleCaughtUp(t *testing.T) {
	cases := []struct {
		ins, flush uint64
		want       bool
	}{
		{0x3000148, 0x3000148, true},  // nothing pending
		{0x3002018, 0x3002000, true},  // insert right after a short page header
		{0x4000028, 0x4000000, true},  // right after a segment's long header
		{0x3002018, 0x3001ff0, false}, // flush behind the boundary: a record is missing
		{0x3000200, 0x3000148, false}, // ordinary lag
		{0x4000018, 0x4000000, false}, // offset 24 at a segment start is not a header end
		{0x3002030, 0x3002018, false}, // not at a page start
	}
	for _, c := range cases {
		if got := idleCaughtUp(lsnstore.PositionOf(lsnstore.LSN(c.ins)), lsnstore.PositionOf(lsnstore.LSN(c.flush))); got != c.want {
			t.Errorf("idleCaughtUp(%v, %v) = %v, want %v", lsnstore.LSN(c.ins), lsnstore.LSN(c.flush), got, c.want)
		}
	}
}

func TestCloseDependentsIsTransitiveAndNormalized(t *testing.T) {
	got := closeDependents(map[string][]string{
		"A":             {"b"},
		"b":             {"public.C", "a"}, // a cycle back to a
		"\"Other\"":     {"d"},
		"public.unused": nil,
	})
	want := map[string][]string{"a": {"b", "c"}, "b": {"a", "c"}, "other": {"d"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("closeDependents = %v, want %v", got, want)
	}
}

type Customer struct {
	ID   uint
	Name string
}

type Payment struct {
	ID      uint
	OrderID uint
}

type Order struct {
	ID         uint
	CustomerID uint
	Customer   Customer
	Total      int
}

// dryDB is a *gorm.DB that builds statements without a server.
func dryDB(t testing.TB) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(postgres.New(postgres.Config{DSN: "host=127.0.0.1 port=1 sslmode=disable"}),
		&gorm.Config{DryRun: true, DisableAutomaticPing: true, Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func TestStatementTables(t *testing.T) {
	db := dryDB(t)
	cases := []struct {
		name  string
		query func(*gorm.DB) *gorm.DB
		want  []string // nil: unknown
	}{
		{"model", func(d *gorm.DB) *gorm.DB { return d.Model(&Order{}).Where("total > ?", 1) }, []string{"orders"}},
		{"relation join", func(d *gorm.DB) *gorm.DB { return d.Model(&Order{}).Joins("Customer") }, []string{"orders", "customers"}},
		{"raw join", func(d *gorm.DB) *gorm.DB { return d.Model(&Order{}).Joins("JOIN payments p ON p.order_id = orders.id") }, nil},
		{"subquery", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Where("customer_id IN (?)", d.Model(&Customer{}).Select("id"))
		}, []string{"orders", "customers"}},
		{"table name", func(d *gorm.DB) *gorm.DB { return d.Table("public.orders") }, []string{"orders"}},
		{"table alias", func(d *gorm.DB) *gorm.DB { return d.Table("orders o") }, []string{"orders"}},
		{"table subquery", func(d *gorm.DB) *gorm.DB { return d.Table("(?) AS x", d.Model(&Customer{})) }, nil},
		// The catalog waits for the last schema change too.
		{"catalog table", func(d *gorm.DB) *gorm.DB { return d.Table("information_schema.tables") }, []string{"tables", lsnstore.Schema}},
		{"catalog table alias", func(d *gorm.DB) *gorm.DB { return d.Table(`"pg_catalog"."pg_class" c`) }, []string{"pg_class", lsnstore.Schema}},
		// Subqueries written as text in a condition are read too.
		{"text subquery", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Where("customer_id IN (SELECT id FROM customers WHERE name = ?)", "x")
		}, []string{"orders", "customers"}},
		{"text exists", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Where("EXISTS (select 1 from payments p WHERE p.order_id = orders.id)")
		}, []string{"orders", "payments"}},
		{"text named subquery", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Where("customer_id IN (SELECT id FROM customers WHERE name = @name)", sql.Named("name", "x"))
		}, []string{"orders", "customers"}},
		{"text having subquery", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Group("customer_id").Having("count(*) > (SELECT count(*) FROM payments)")
		}, []string{"orders", "payments"}},
		{"text condition without subquery", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Where("lower(table_name) = ? OR selected = ?", "x", true)
		}, []string{"orders"}},
		{"text subquery that writes", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Where("id IN (SELECT nextval('s'))")
		}, nil},
		{"select column subquery", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Select("id, (SELECT count(*) FROM payments) AS n")
		}, []string{"orders", "payments"}},
		{"order subquery", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Order("(SELECT max(id) FROM payments)")
		}, []string{"orders", "payments"}},
		{"select subquery not a read", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Select("id, (SELECT setval('s', 1)) AS n")
		}, nil},
		{"relation join with conditions", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Order{}).Joins("Customer", d.Where(&Customer{Name: "x"}).Where("id IN (?)", d.Model(&Payment{}).Select("order_id")))
		}, []string{"orders", "customers", "payments"}},
		// GORM builds many2many association reads as a clause.From.
		{"from joins", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Customer{}).Clauses(clause.From{
				Tables: []clause.Table{{Name: clause.CurrentTable}},
				Joins: []clause.Join{{
					Type:  clause.InnerJoin,
					Table: clause.Table{Name: "customer_tags"},
					ON:    clause.Where{Exprs: []clause.Expression{clause.Eq{Column: clause.Column{Table: "customer_tags", Name: "customer_id"}, Value: clause.PrimaryColumn}}},
				}},
			})
		}, []string{"customers", "customer_tags"}},
		{"from tables", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Customer{}).Clauses(clause.From{Tables: []clause.Table{{Name: "customers"}, {Name: "orders o", Raw: true}}})
		}, []string{"customers", "orders"}},
		{"from raw join", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Customer{}).Clauses(clause.From{Joins: []clause.Join{{Expression: clause.Expr{SQL: "JOIN payments ON true"}}}})
		}, nil},
		{"from raw table", func(d *gorm.DB) *gorm.DB {
			return d.Model(&Customer{}).Clauses(clause.From{Tables: []clause.Table{{Name: "(SELECT 1) x", Raw: true}}})
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			var known bool
			tx := c.query(db.Session(&gorm.Session{}))
			// Run the statement's Query chain far enough to parse the model.
			stmt := tx.Statement
			if stmt.Model != nil {
				if err := stmt.Parse(stmt.Model); err != nil {
					t.Fatal(err)
				}
			}
			got, known = statementTables(stmt, classify.New(classify.Config{Dialect: classify.Postgres}))
			if c.want == nil {
				if known {
					t.Fatalf("tables %v known, want unknown", got)
				}
				return
			}
			sort.Strings(got)
			got = slices.Compact(got) // a table named twice is looked up once either way
			want := append([]string(nil), c.want...)
			sort.Strings(want)
			if !known || !reflect.DeepEqual(got, want) {
				t.Fatalf("tables %v (known %v), want %v", got, known, want)
			}
		})
	}
}

func TestSessionTokenRoundTripAndErrors(t *testing.T) {
	s := &SessionState{}
	s.raise(7, lsnstore.PositionOf(0x16B374D848))
	s.raise(7, lsnstore.PositionOf(0x10)) // lower: ignored
	s.raise(3, lsnstore.PositionOf(0x20))
	gtids, _ := lsnstore.ParsePosition("0/64+1=0/14")
	s.raise(9, gtids)
	s.raise(9, lsnstore.PositionOf(0x65)) // merged lane by lane
	tok := s.Token()
	if tok != "v1.3=0/20.7=16/B374D848.9=0/65+1=0/14" {
		t.Fatalf("token %q", tok)
	}
	back, err := ParseToken(tok)
	if err != nil || !back.position(7).Equal(lsnstore.PositionOf(0x16B374D848)) || !back.position(3).Equal(lsnstore.PositionOf(0x20)) ||
		back.position(9).String() != "0/65+1=0/14" {
		t.Fatalf("round trip: %v %v", back, err)
	}
	// The token goes into a cookie: no byte outside RFC 6265's cookie-octet.
	for _, c := range []byte(tok) {
		if c <= ' ' || c == '"' || c == ',' || c == ';' || c == '\\' || c >= 0x7f {
			t.Fatalf("token %q has the byte %q", tok, c)
		}
	}
	for _, bad := range []string{"v2.1=0/1", "v1.x=0/1", "v1.1", "v1.1=zz", "v1.1=0/1;x", "v1.1=0/1+", "v1.1=0/1+a=b"} {
		if _, err := ParseToken(bad); err == nil {
			t.Errorf("ParseToken(%q) accepted", bad)
		}
	}
}

// TestRawSchemaChangesAndCatalogReads: a schema change publishes the
// schema position with its tables, a catalog read waits for it, and a
// schema change whose objects are unknown raises everything.
func TestRawSchemaChangesAndCatalogReads(t *testing.T) {
	p := &Plugin{classifier: classify.New(classify.Config{Dialect: classify.Postgres})}
	cases := []struct {
		sql           string
		reads, writes []string
	}{
		{sql: `CREATE TABLE "Widgets" (id int)`, writes: []string{"widgets", lsnstore.Schema}},
		{sql: `ALTER TABLE widgets RENAME TO gizmos`, writes: []string{"gizmos", "widgets", lsnstore.Schema}},
		{sql: `DROP INDEX idx_widgets_name`, writes: nil},
		{sql: `INSERT INTO widgets (id) VALUES (1)`, writes: []string{"widgets"}},
		{sql: `SELECT count(*) FROM information_schema.tables WHERE table_name = $1`, reads: []string{"tables", lsnstore.Schema}},
		{sql: `SELECT to_regclass('widgets')`, reads: []string{lsnstore.Schema}},
		{sql: `SELECT * FROM widgets`, reads: []string{"widgets"}},
	}
	for _, c := range cases {
		got := p.classify(c.sql)
		if c.reads != nil {
			if got.kind != kindRead || !got.readsKnown || !reflect.DeepEqual(got.reads, c.reads) {
				t.Errorf("%s: kind %v reads %q (known %v), want a read of %q", c.sql, got.kind, got.reads, got.readsKnown, c.reads)
			}
			continue
		}
		if got.kind != kindWrite || !reflect.DeepEqual(got.writes, c.writes) {
			t.Errorf("%s: kind %v writes %q, want a write of %q", c.sql, got.kind, got.writes, c.writes)
		}
	}
}
