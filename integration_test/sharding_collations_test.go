package integration_test

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	mysqldrv "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/sharding"
)

// collTable is a sharded table whose label column has one collation (and
// type: text or varchar(20) unless typ), and what a merge can do with
// it: order (byte order) and equal (equality by bytes).
type collTable struct {
	name, coll   string
	order, equal bool
	typ          string
	// rank: a text column of a collation that is not byte order, which a
	// merge sorts by the ranks one shard gives (deterministic PostgreSQL
	// collations: every ordering shape; others, whose ranks tie values of
	// other bytes, in a varchar or text column: ordering rows only).
	rank bool
}

// labelRow is a row of every collTable.
type labelRow struct {
	ID     int64
	UserID int64
	Label  string
}

// labelCount is a group of a label.
type labelCount struct {
	Label string
	N     int64
}

// collationLabels mixes case, accents and trailing spaces: each
// non-byte-order collation sorts or groups them otherwise than bytes.
// "a\t" sorts after "a" in char(n), compared without its padding, and
// before it padded ("a\t  " < "a   ").
var collationLabels = []string{"b", "B", "a", "A", "é", "e", "Z", "z", "a", "a ", "É", "Ω", "ä", "a\t", "b "}

// Merged reads that compare text (ORDER BY, MIN/MAX, DISTINCT, GROUP BY,
// count(DISTINCT), HAVING) on a table whose text column has a given
// collation: exact, equal to what one reference database holding every
// row answers, when the collation compares in byte order (PostgreSQL "C"
// and libc "C.utf8"; MariaDB utf8mb4_nopad_bin, declared on the column or
// inherited from the table); those that only compare equality are exact
// under a deterministic PostgreSQL collation (ICU, libc), and so are
// ORDER BY, MIN/MAX and the order of groups there, merged by the ranks
// one shard gives the values; ordering rows (ORDER BY label, id) is exact
// by ranks under a nondeterministic ICU collation and MariaDB's _ci and
// PAD SPACE collations of a varchar column too (values the collation calls
// equal tie, and the next key decides); every other is refused with
// ErrScatterUnsupported naming the column (MIN/MAX, DISTINCT, GROUP BY
// under a nondeterministic ICU collation, MariaDB's _ci collations, column
// or database default, and PAD SPACE utf8mb4_bin). An explicit COLLATE in
// the statement is refused. char(n) columns: PostgreSQL's (padded, compared without the
// padding) merge as their collation says; MariaDB's CHAR(n) in
// utf8mb4_nopad_bin merges equality only (the server sorts it padded but
// compares MIN/MAX unpadded). Before char(n) was compared without its
// padding, PostgreSQL char(4) "C" Order.Limit and Distinct.Order were
// refused (a shard's rows out of the merge order), Group.Order put
// "a\t" before "a", and Having = 'a' lost its group (under "C" and ICU);
// MariaDB's CHAR(4) merged order put "a" before "a\t", the server the
// reverse. A join on the key of a "C" table with another table checks
// the joined table's collations: before, grouping by a joined
// nondeterministic (case-insensitive) column returned 14 groups where the
// server has fewer, and ordering by an alias of a joined ICU column was
// refused only because a shard's rows arrived out of byte order.
func TestShardingMergeCollations(t *testing.T) {
	type shape struct {
		name  string
		order bool // compares order (else only equality)
		pg    bool // PostgreSQL only
		q     func(db *gorm.DB, table string) (any, error)
	}
	// ranked: the shapes a merge sorts by ranks on a rank table with
	// byte equality; tied: those it sorts by ranks that may tie.
	ranked := map[string]bool{"Order.Limit": true, "Distinct.Order": true, "min/max": true, "Group.Order": true}
	tied := map[string]bool{"Order.Limit": true}
	shapes := []shape{
		{"Order.Limit", true, false, func(db *gorm.DB, tb string) (any, error) {
			var out []string
			err := db.Table(tb).Order("label").Order("id").Limit(8).Pluck("label", &out).Error
			return out, err
		}},
		{"min/max", true, false, func(db *gorm.DB, tb string) (any, error) {
			var out struct{ Lo, Hi string }
			err := db.Table(tb).Select("min(label) AS lo, max(label) AS hi").Scan(&out).Error
			return out, err
		}},
		{"Distinct.Order", true, false, func(db *gorm.DB, tb string) (any, error) {
			var out []string
			err := db.Table(tb).Distinct("label").Order("label").Pluck("label", &out).Error
			return out, err
		}},
		{"Group.Order", true, false, func(db *gorm.DB, tb string) (any, error) {
			var out []labelCount
			err := db.Table(tb).Select("label, count(*) AS n").Group("label").Order("label").Scan(&out).Error
			return out, err
		}},
		{"Having <", true, false, func(db *gorm.DB, tb string) (any, error) {
			var out []labelCount
			err := db.Table(tb).Select("label, count(*) AS n").Group("label").Having("label < ?", "b").Scan(&out).Error
			sort.Slice(out, func(i, j int) bool { return out[i].Label < out[j].Label })
			return out, err
		}},
		{"Distinct", false, false, func(db *gorm.DB, tb string) (any, error) {
			var out []string
			err := db.Table(tb).Distinct("label").Pluck("label", &out).Error
			slices.Sort(out)
			return out, err
		}},
		{"Group", false, false, func(db *gorm.DB, tb string) (any, error) {
			var out []labelCount
			err := db.Table(tb).Select("label, count(*) AS n").Group("label").Scan(&out).Error
			sort.Slice(out, func(i, j int) bool { return out[i].Label < out[j].Label })
			return out, err
		}},
		{"Having =", false, false, func(db *gorm.DB, tb string) (any, error) {
			var out []labelCount
			err := db.Table(tb).Select("label, count(*) AS n").Group("label").Having("label = ?", "a").Scan(&out).Error
			return out, err
		}},
		{"count(DISTINCT)", false, true, func(db *gorm.DB, tb string) (any, error) {
			var n int64
			err := db.Table(tb).Distinct("label").Count(&n).Error
			return n, err
		}},
	}
	check := func(t *testing.T, db, ref *gorm.DB, tables []collTable, pg bool) {
		for _, tb := range tables {
			for _, sh := range shapes {
				if sh.pg && !pg {
					continue
				}
				what := fmt.Sprintf("%s on label COLLATE %s", sh.name, tb.coll)
				got, err := sh.q(db, tb.name)
				if ok := tb.equal && (tb.order || !sh.order || tb.rank && ranked[sh.name]) || !tb.equal && tb.rank && tied[sh.name]; !ok {
					if !errors.Is(err, sharding.ErrScatterUnsupported) || !strings.Contains(err.Error(), `"label"`) {
						t.Errorf("%s: %v, want ErrScatterUnsupported naming the column", what, err)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", what, err)
					continue
				}
				want, err := sh.q(ref, tb.name)
				if err != nil {
					t.Fatalf("%s: reference: %v", what, err)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s:\n sharded   %q\n reference %q", what, got, want)
				}
			}
		}
		// An explicit COLLATE is refused, even on a byte-order column.
		var out []string
		err := db.Table(tables[0].name).Order("label COLLATE "+tables[len(tables)-1].coll).Limit(3).Pluck("label", &out).Error
		if !errors.Is(err, sharding.ErrScatterUnsupported) || !strings.Contains(err.Error(), "COLLATE") {
			t.Errorf("ORDER BY label COLLATE %s: %v, want ErrScatterUnsupported naming the COLLATE", tables[len(tables)-1].coll, err)
		}
	}
	seed := func(t *testing.T, db, ref *gorm.DB, tables []collTable, users []int64) {
		for _, tb := range tables {
			var rows []labelRow
			for i, l := range collationLabels {
				rows = append(rows, labelRow{ID: int64(i + 1), UserID: users[i%len(users)], Label: l})
			}
			for _, d := range []*gorm.DB{db, ref} {
				if err := d.Table(tb.name).Create(&rows).Error; err != nil {
					t.Fatalf("%s: %v", tb.name, err)
				}
			}
		}
	}

	t.Run("postgres", func(t *testing.T) {
		pg := testcluster.PostgresFor(t)
		// The collations: byte order ("C", libc "C.utf8" when the server
		// has it), ICU, a libc locale that is not byte order when the
		// server has one, and a nondeterministic ICU collation.
		tables := []collTable{{"labels_c", `"C"`, true, true, "", false}}
		var probe *gorm.DB
		var err error
		if probe, err = gorm.Open(postgres.Open(pg.PrimaryDSN("postgres")), quiet()); err != nil {
			t.Fatal(err)
		}
		var libc []string
		if err := probe.Raw(`SELECT collname FROM pg_collation WHERE collprovider = 'c' AND collencoding IN (-1, 6) AND collname NOT IN ('C', 'POSIX', 'ucs_basic') ORDER BY collname <> 'en_US.utf8', collname`).Scan(&libc).Error; err != nil {
			t.Fatal(err)
		}
		closeDB(probe)
		for _, c := range libc {
			if strings.EqualFold(c, "C.utf8") || strings.EqualFold(c, "C.UTF-8") {
				tables = append(tables, collTable{"labels_cutf8", `"` + c + `"`, true, true, "", false})
				break
			}
		}
		for _, c := range libc {
			if !strings.HasPrefix(strings.ToLower(c), "c.") {
				tables = append(tables, collTable{"labels_libc", `"` + c + `"`, false, true, "", true})
				break
			}
		}
		t.Logf("libc collations of the server: %d; tables %v", len(libc), tables)
		tables = append(tables, collTable{"labels_icu", `"en-x-icu"`, false, true, "", true}, collTable{"labels_ci", "ci", false, false, "", true},
			// char(n): padded with spaces, compared without them.
			collTable{"labels_char_c", `"C"`, true, true, "char(4)", false}, collTable{"labels_char_icu", `"en-x-icu"`, false, true, "char(4)", false})
		var cfgTables []sharding.Table
		for _, tb := range tables {
			cfgTables = append(cfgTables, sharding.Table{Name: tb.name, Key: "user_id"})
		}
		e := newShEnv(t, func(c *sharding.Config) { c.Tables = append(c.Tables, cfgTables...) })
		ref, err := gorm.Open(postgres.Open(pg.PrimaryDSN(pg.CreateDatabase(t))), quiet())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeDB(ref) })
		dbs := []*gorm.DB{ref}
		for _, name := range e.names {
			dbs = append(dbs, e.direct[name])
		}
		for _, d := range dbs {
			if err := d.Exec(`CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`).Error; err != nil {
				t.Fatal(err)
			}
			for _, tb := range tables {
				typ := cmp.Or(tb.typ, "text")
				if err := d.Exec(`CREATE TABLE ` + tb.name + ` (id bigint PRIMARY KEY, user_id bigint, label ` + typ + ` COLLATE ` + tb.coll + `)`).Error; err != nil {
					t.Fatal(err)
				}
			}
		}
		var users []int64
		for u := int64(1); len(users) < 4; u++ {
			if s := e.s.ShardOf(u); !slices.ContainsFunc(users, func(x int64) bool { return e.s.ShardOf(x) == s }) {
				users = append(users, u)
			}
		}
		seed(t, e.db, ref, tables, users)
		check(t, e.db, ref, tables, true)

		// Joined tables (on the key: merged over the shards): a column of
		// the joined table compares by its collation, not the first
		// table's.
		join := func(other string) *gorm.DB {
			return e.db.Table("labels_c").Joins("JOIN " + other + " j ON j.user_id = labels_c.user_id AND j.id = labels_c.id")
		}
		var jrows []labelCount
		err = join("labels_ci").Select("j.label AS label, count(*) AS n").Group("j.label").Scan(&jrows).Error
		if !errors.Is(err, sharding.ErrScatterUnsupported) || !strings.Contains(err.Error(), `"labels_ci"`) {
			t.Errorf("Group by a joined nondeterministic column: %v (%v), want ErrScatterUnsupported naming the table", err, jrows)
		}
		var jl []string
		err = join("labels_icu").Select("j.label AS jl, labels_c.id").Order("jl").Order("labels_c.id").Limit(8).Pluck("jl", &jl).Error
		if !errors.Is(err, sharding.ErrScatterUnsupported) || !strings.Contains(err.Error(), `"labels_icu"`) {
			t.Errorf("Order by an alias of a joined ICU column: %v (%q), want ErrScatterUnsupported naming the table", err, jl)
		}
		// A joined byte-order column merges, as one database sorts it.
		q := func(db *gorm.DB) ([]labelCount, error) {
			var out []labelCount
			err := db.Table("labels_c").Joins("JOIN labels_char_c j ON j.user_id = labels_c.user_id AND j.id = labels_c.id").
				Select("j.label AS label, count(*) AS n").Group("j.label").Order("label").Scan(&out).Error
			return out, err
		}
		got, err := q(e.db)
		if err != nil {
			t.Fatalf("joined char(4) \"C\" Group.Order: %v", err)
		}
		want, err := q(ref)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("joined char(4) \"C\" Group.Order:\n sharded   %v\n reference %v", got, want)
		}
	})

	t.Run("mariadb", func(t *testing.T) {
		m := testcluster.MariaDBFor(t)
		dsns := map[*gorm.DB]string{}
		openDSN := func(dsn string) *gorm.DB {
			db, err := gorm.Open(mysql.Open(dsn), quiet())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { closeDB(db) })
			dsns[db] = dsn
			return db
		}
		open := func() *gorm.DB { return openDSN(m.PrimaryDSN(m.CreateDatabase(t))) }
		// The column's own collation, the table's default, the database's
		// default (utf8mb4_unicode_ci, set before the table).
		tables := []collTable{
			{"labels_nopad", "utf8mb4_nopad_bin", true, true, "", false},
			{"labels_tabledef", "utf8mb4_nopad_bin", true, true, "", false},
			{"labels_bin", "utf8mb4_bin", false, false, "", true},
			{"labels_ci", "utf8mb4_general_ci", false, false, "", true},
			{"labels_dbdef", "utf8mb4_unicode_ci", false, false, "", true},
			{"labels_char_nopad", "utf8mb4_nopad_bin", false, true, "char(4)", false},
			{"labels_char_bin", "utf8mb4_bin", false, false, "char(4)", false},
		}
		ref, def := open(), open()
		direct := map[string]*gorm.DB{"m0": open(), "m1": open()}
		for _, d := range []*gorm.DB{ref, direct["m0"], direct["m1"]} {
			for _, sql := range []string{
				`ALTER DATABASE CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci`,
				`CREATE TABLE labels_nopad (id bigint PRIMARY KEY, user_id bigint, label varchar(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin)`,
				`CREATE TABLE labels_tabledef (id bigint PRIMARY KEY, user_id bigint, label varchar(20)) DEFAULT CHARSET utf8mb4 COLLATE utf8mb4_nopad_bin`,
				`CREATE TABLE labels_bin (id bigint PRIMARY KEY, user_id bigint, label varchar(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)`,
				`CREATE TABLE labels_ci (id bigint PRIMARY KEY, user_id bigint, label varchar(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci)`,
				`CREATE TABLE labels_dbdef (id bigint PRIMARY KEY, user_id bigint, label varchar(20))`,
				`CREATE TABLE labels_char_nopad (id bigint PRIMARY KEY, user_id bigint, label char(4) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin)`,
				`CREATE TABLE labels_char_bin (id bigint PRIMARY KEY, user_id bigint, label char(4) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)`,
			} {
				if err := d.Exec(sql).Error; err != nil {
					t.Fatal(err)
				}
			}
		}
		var cfgTables []sharding.Table
		for _, tb := range tables {
			cfgTables = append(cfgTables, sharding.Table{Name: tb.name, Key: "user_id"})
		}
		s := sharding.New(sharding.Config{
			Tables:    cfgTables,
			Shards:    []sharding.ShardConfig{{Name: "m0", DB: direct["m0"]}, {Name: "m1", DB: direct["m1"]}},
			Algorithm: sharding.EvenBuckets(1024, "m0", "m1"),
		})
		if err := def.Use(s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		users := []int64{1, 600}
		if s.ShardOf(users[0]) == s.ShardOf(users[1]) {
			t.Fatalf("users %v on one shard", users)
		}
		seed(t, def, ref, tables, users)
		// Why CHAR(n) under utf8mb4_nopad_bin is not merged in order:
		// the server sorts it padded in ORDER BY ('a\t' first) and
		// compares it read without padding in MIN ('a' first).
		var first, lo string
		if err := ref.Raw("SELECT label FROM labels_char_nopad WHERE label IN ('a', 'a\t') ORDER BY label LIMIT 1").Scan(&first).Error; err != nil {
			t.Fatal(err)
		}
		if err := ref.Raw("SELECT min(label) FROM labels_char_nopad WHERE label IN ('a', 'a\t')").Scan(&lo).Error; err != nil {
			t.Fatal(err)
		}
		t.Logf("CHAR(4) utf8mb4_nopad_bin: ORDER BY first %q, MIN %q", first, lo)
		check(t, def, ref, tables, false)

		// Text computed by an expression (a literal, CAST(... AS CHAR))
		// takes the connection's collation, not the column's: under the
		// driver's default utf8mb4_general_ci 'x' = 'X' and 'a' = 'A'.
		// Merged, such keys are refused naming the expression; with
		// collation_connection=utf8mb4_nopad_bin in the DSN they merge as
		// one database answers.
		for _, sh := range exprShapes {
			what := "connection utf8mb4_general_ci: " + sh.name
			got, err := sh.q(def)
			if !errors.Is(err, sharding.ErrScatterUnsupported) || !strings.Contains(err.Error(), "collation_connection") || !strings.Contains(err.Error(), sh.expr) {
				want, _ := sh.q(ref)
				t.Errorf("%s: %v (sharded %v, reference %v), want ErrScatterUnsupported naming %s and collation_connection", what, err, got, want, sh.expr)
			}
		}
		// The same keys, plain columns of a byte-order table, still merge.
		var plain []labelCount
		if err := def.Table("labels_nopad").Select("label, count(*) AS n").Group("label").Scan(&plain).Error; err != nil {
			t.Errorf("Group by a utf8mb4_nopad_bin column under a utf8mb4_general_ci connection: %v", err)
		}
		// The Go driver (1.8) knows no utf8mb4_nopad_bin for its
		// collation parameter (a one-byte id); the variable is set
		// instead.
		binDSN := func(db *gorm.DB) string {
			cfg, err := mysqldrv.ParseDSN(dsns[db])
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Params == nil {
				cfg.Params = map[string]string{}
			}
			cfg.Params["collation_connection"] = "utf8mb4_nopad_bin"
			return cfg.FormatDSN()
		}
		refBin, defBin := openDSN(binDSN(ref)), openDSN(binDSN(def))
		var cc string
		if err := refBin.Raw("SELECT @@collation_connection").Scan(&cc).Error; err != nil || cc != "utf8mb4_nopad_bin" {
			t.Fatalf("collation_connection in the DSN: %q, %v", cc, err)
		}
		sBin := sharding.New(sharding.Config{
			Tables:    cfgTables,
			Shards:    []sharding.ShardConfig{{Name: "m0", DB: openDSN(binDSN(direct["m0"]))}, {Name: "m1", DB: openDSN(binDSN(direct["m1"]))}},
			Algorithm: sharding.EvenBuckets(1024, "m0", "m1"),
		})
		if err := defBin.Use(sBin); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sBin.Close() })
		for _, sh := range exprShapes {
			what := "connection utf8mb4_nopad_bin: " + sh.name
			got, err := sh.q(defBin)
			if err != nil {
				t.Errorf("%s: %v", what, err)
				continue
			}
			want, err := sh.q(refBin)
			if err != nil {
				t.Fatalf("%s: reference: %v", what, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s:\n sharded   %v\n reference %v", what, got, want)
			}
		}
	})
}

// exprShapes are merged reads of labels_nopad ordered, grouped or
// de-duplicated by text an expression computes, whose collation on
// MariaDB is the connection's; expr is the expression the refusal names.
var exprShapes = []struct {
	name, expr string
	q          func(db *gorm.DB) (any, error)
}{
	{"Group by CAST(label AS CHAR)", "CAST(label AS CHAR)", func(db *gorm.DB) (any, error) {
		var out []labelCount
		err := db.Table("labels_nopad").Select("CAST(label AS CHAR) AS label, count(*) AS n").Group("CAST(label AS CHAR)").Scan(&out).Error
		sort.Slice(out, func(i, j int) bool { return out[i].Label < out[j].Label })
		return out, err
	}},
	{"Order by a CASE of literals", "CASE", func(db *gorm.DB) (any, error) {
		var out []struct {
			ID int64
			K  string
		}
		err := db.Table("labels_nopad").Select("id, CASE WHEN id % 2 = 0 THEN 'x' ELSE 'X' END AS k").Order("k").Order("id").Limit(6).Scan(&out).Error
		return out, err
	}},
	{"Distinct CASE of literals", "CASE", func(db *gorm.DB) (any, error) {
		var out []string
		err := db.Table("labels_nopad").Distinct("CASE WHEN id % 2 = 0 THEN 'x' ELSE 'X' END AS k").Pluck("k", &out).Error
		slices.Sort(out)
		return out, err
	}},
	{"max of CONCAT of numbers", "max(", func(db *gorm.DB) (any, error) {
		var out struct{ Hi string }
		err := db.Table("labels_nopad").Select("max(CASE WHEN id = 3 THEN 'Y' ELSE CONCAT('x', id % 2) END) AS hi").Scan(&out).Error
		return out, err
	}},
}
