package plugin

import (
	"context"
	"slices"
	"strings"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/lsnstore"
)

type moveItem struct {
	ID      uint
	Name    string
	Version int
}

func (moveItem) TableName() string { return "items" }

type movePart struct {
	ID     uint
	ItemID uint
	Label  string
}

func (movePart) TableName() string { return "parts" }

// dryMySQL is dryDB on MySQL's dialect.
func dryMySQL(t *testing.T) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(mysql.New(mysql.Config{DSN: "u:p@tcp(127.0.0.1:1)/d", SkipInitializeWithVersion: true}),
		&gorm.Config{DryRun: true, DisableAutomaticPing: true, Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// TestUpdateMovesKey: a GORM Update that may assign the key column, in
// any spelling GORM accepts (a zero key written by Select, a qualified,
// quoted or upper-case name, clause.Set, clause.Assignments, a gorm.Expr
// value, a struct with another key), raises the key the rows move to
// with the keys they move from, or proves nothing; an Update that does
// not assign it keeps its keys.
func TestUpdateMovesKey(t *testing.T) {
	for _, d := range []classify.Dialect{classify.Postgres, classify.MySQL} {
		p := catalogKeysPlugin(map[string]*keyDef{}, d)
		db := dryDB(t)
		if d == classify.MySQL {
			db = dryMySQL(t)
		}
		db = db.Session(&gorm.Session{SkipDefaultTransaction: true})
		byKey := func() *gorm.DB { return db.Model(&moveItem{ID: 1}) }
		for _, tc := range []struct {
			name  string
			write func() *gorm.DB
			want  []int64 // the keys raised; nil: proves nothing
		}{
			{"Update of another column", func() *gorm.DB { return byKey().Update("name", "x") }, []int64{1}},
			{"an expression naming the key", func() *gorm.DB { return byKey().Update("name", gorm.Expr("id")) }, []int64{1}},
			{"Save", func() *gorm.DB { return db.Save(&moveItem{ID: 1, Name: "z"}) }, []int64{1}},
			{"Select(*) writes a zero key", func() *gorm.DB {
				return db.Model(&moveItem{}).Where("id = ?", 1).Select("*").Updates(moveItem{Name: "x"})
			}, []int64{1, 0}},
			{"Select(*) of the model's key", func() *gorm.DB { return byKey().Select("*").Updates(moveItem{Name: "x"}) }, []int64{1, 0}},
			{"Select of the key", func() *gorm.DB { return byKey().Select("id", "name").Updates(&moveItem{Name: "x"}) }, []int64{1, 0}},
			{"Update of a qualified key", func() *gorm.DB { return byKey().Update("items.id", 9) }, []int64{1, 9}},
			{"Updates of a qualified key", func() *gorm.DB { return byKey().Updates(map[string]any{"items.id": 9}) }, []int64{1, 9}},
			{"UpdateColumn of a qualified key", func() *gorm.DB { return byKey().UpdateColumn("items.id", 9) }, []int64{1, 9}},
			{"UpdateColumns of an upper-case key", func() *gorm.DB { return byKey().UpdateColumns(map[string]any{"ID": 9}) }, []int64{1, 9}},
			{"a struct with another key", func() *gorm.DB { return byKey().Updates(moveItem{ID: 9, Name: "x"}) }, []int64{1, 9}},
			{"Save of another key through Model", func() *gorm.DB { return byKey().Save(&moveItem{ID: 9, Name: "x"}) }, []int64{1, 9}},
			{"Omit leaves the key", func() *gorm.DB { return byKey().Omit("name").Updates(moveItem{ID: 3, Name: "x"}) }, []int64{1, 3}},
			{"clause.Set", func() *gorm.DB {
				return db.Model(&moveItem{}).Where("id = ?", 1).
					Clauses(clause.Set{{Column: clause.Column{Name: "id"}, Value: 9}}).Update("name", "x")
			}, []int64{1, 9}},
			{"clause.Set of a qualified column", func() *gorm.DB {
				return db.Model(&moveItem{}).Where("id = ?", 1).
					Clauses(clause.Set{{Column: clause.Column{Table: "items", Name: "id"}, Value: 9}}).Update("name", "x")
			}, []int64{1, 9}},
			{"clause.Assignments", func() *gorm.DB {
				return db.Model(&moveItem{}).Where("id = ?", 1).
					Clauses(clause.Assignments(map[string]any{"id": 9})).Update("name", "x")
			}, []int64{1, 9}},
			{"a gorm.Expr key", func() *gorm.DB { return byKey().Update("id", gorm.Expr("id + 1")) }, nil},
			{"a qualified gorm.Expr key", func() *gorm.DB { return byKey().Updates(map[string]any{"items.id": gorm.Expr("id + 1")}) }, nil},
			// The classifier does not read a BETWEEN: the SET list's text.
			{"unread WHERE, another column", func() *gorm.DB { return byKey().Where("version BETWEEN ? AND ?", 1, 2).Update("name", "x") }, []int64{1}},
			{"unread WHERE, a qualified key", func() *gorm.DB { return byKey().Where("version BETWEEN ? AND ?", 1, 2).Update("items.id", 9) }, nil},
			{"unread WHERE, a zero key", func() *gorm.DB {
				return byKey().Where("version BETWEEN ? AND ?", 1, 2).Select("*").Updates(moveItem{Name: "x"})
			}, nil},
		} {
			t.Run(d.String()+"/"+tc.name, func(t *testing.T) {
				checkMoveNames(t, p, tc.write(), "items", "id", tc.want)
			})
		}
		if d != classify.MySQL {
			continue
		}
		// MySQL applies two assignments of a column in order.
		t.Run("mysql/two assignments", func(t *testing.T) {
			checkMoveNames(t, p, byKey().Updates(map[string]any{"id": 5, "items.id": 6}), "items", "id", nil)
		})
	}
}

// TestUpdateMovesKeyColumn: an Update moving rows to another value of a
// configured key column, by a qualified name, raises both values.
func TestUpdateMovesKeyColumn(t *testing.T) {
	p := catalogKeysPlugin(map[string]*keyDef{}, classify.MySQL)
	db := dryMySQL(t).Session(&gorm.Session{SkipDefaultTransaction: true})
	byItem := func() *gorm.DB { return db.Model(&movePart{}).Where("item_id = ?", 3) }
	checkMoveNames(t, p, byItem().Update("parts.item_id", 4), "parts", "item_id", []int64{3, 4})
	checkMoveNames(t, p, byItem().Updates(map[string]any{"item_id": 4, "parts.item_id": 5}), "parts", "item_id", nil)
	checkMoveNames(t, p, byItem().Update("label", "x"), "parts", "item_id", []int64{3})
}

// checkMoveNames checks the names a model's write raises for col of
// table: the keys want, or col's unkeyed position (want nil).
func checkMoveNames(t *testing.T, p *Plugin, tx *gorm.DB, table, col string, want []int64) {
	t.Helper()
	if tx.Error != nil {
		t.Fatal(tx.Error)
	}
	sql := tx.Statement.SQL.String()
	names, ok := p.keyedWriteNames(tx.Statement, table, "sig")
	var got []string // the keys of col, without the signed table
	for _, n := range names[min(1, len(names)):] {
		if strings.HasPrefix(n, lsnstore.KeyNameText(table, col, "")) {
			got = append(got, n)
		}
	}
	if want == nil {
		if ok && !slices.Contains(names, lsnstore.UnkeyedColumnName(table, col)) {
			t.Fatalf("%s %v: names %v prove %s", sql, tx.Statement.Vars, names, col)
		}
		return
	}
	var wantNames []string
	for _, k := range want {
		wantNames = append(wantNames, lsnstore.KeyName(table, col, k))
	}
	if !ok || !slices.Equal(got, wantNames) {
		t.Fatalf("%s %v: names %v, %v; want %v", sql, tx.Statement.Vars, names, ok, wantNames)
	}
}

// TestSetListNames: the SET list's text names a column as a word, in
// any quoting or case.
func TestSetListNames(t *testing.T) {
	for _, tc := range []struct {
		sql  string
		want bool
	}{
		{`UPDATE "items" SET "name"=$1 WHERE "id" = $2`, false},
		{`UPDATE "items" SET "items"."id"=$1 WHERE "id" = $2`, true},
		{"UPDATE `items` SET `ID`=? WHERE id = ?", true},
		{"UPDATE `items` SET `paid`=?,`item_id`=? WHERE id = ?", false},
		{"UPDATE `items` SET `name`=(SELECT x FROM t WHERE t.id = 1) WHERE id = ?", true},
		{"UPDATE `items` SET `name`=? WHERE id IN (SELECT id FROM t WHERE y = 1)", true}, // the span widens
		{"UPDATE `items` SET `name`=?", false},
		{"something else", true},
	} {
		if got := setListNames(tc.sql, "id"); got != tc.want {
			t.Errorf("setListNames(%q) = %v, want %v", tc.sql, got, tc.want)
		}
	}
}

// TestRawAssignedTwice: a raw UPDATE that assigns a key column twice
// (MySQL stores the last) does not prove the value it moves to.
func TestRawAssignedTwice(t *testing.T) {
	p := catalogKeysPlugin(map[string]*keyDef{"parts": intKey("id")}, classify.MySQL)
	for _, tc := range []struct {
		sql  string
		want []string
	}{
		{"UPDATE parts SET item_id = 4 WHERE item_id = 3", []string{lsnstore.UnkeyedColumnName("parts", "id"),
			lsnstore.KeyName("parts", "item_id", 3), lsnstore.KeyName("parts", "item_id", 4)}},
		{"UPDATE parts SET item_id = 4, parts.item_id = 5 WHERE item_id = 3", nil},
	} {
		c := p.classify(tc.sql)
		names := p.rawWriteNames(context.Background(), c, nil)
		if tc.want == nil {
			if !slices.Equal(names, []string{"parts"}) {
				t.Errorf("%s: names %v, want the table", tc.sql, names)
			}
			continue
		}
		if len(names) == 0 || !slices.Equal(names[1:], tc.want) {
			t.Errorf("%s: names %v, want the signed table and %v", tc.sql, names, tc.want)
		}
	}
}
