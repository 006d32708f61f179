package plugin

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/lsnstore"
)

// catalogPlugin is a plugin (not installed) that knows the primary keys
// keys from the catalog, with a memory store and the PostgreSQL
// classifier.
func catalogPlugin(keys map[string]string) *Plugin {
	defs := make(map[string]*keyDef, len(keys))
	for t, col := range keys {
		defs[t] = intKey(col)
	}
	return catalogKeysPlugin(defs, classify.Postgres)
}

// catalogKeysPlugin is catalogPlugin with keys of any type, for dialect d.
func catalogKeysPlugin(keys map[string]*keyDef, d classify.Dialect) *Plugin {
	p := New(Config{Store: lsnstore.NewMemory(), KeyColumns: map[string][]string{"parts": {"item_id"}}})
	p.classifier = classify.New(classify.Config{Dialect: d})
	p.catalog.keys.Store(&keys)
	return p
}

// TestTableKeyedReads: a read through db.Table (no model) is keyed by the
// catalog's primary key when its WHERE pins it to integers, and by table
// otherwise.
func TestTableKeyedReads(t *testing.T) {
	p := catalogPlugin(map[string]string{"items": "id", "parts": "id"})
	db := dryDB(t)
	for _, tc := range []struct {
		name  string
		query func(*gorm.DB) *gorm.DB
		table string
		want  []int64 // nil: by table
	}{
		{"equality", func(db *gorm.DB) *gorm.DB { return db.Table("items").Where("id = ?", 5) }, "items", []int64{5}},
		{"IN", func(db *gorm.DB) *gorm.DB { return db.Table("items").Where("id IN ?", []int{1, 2}) }, "items", []int64{1, 2}},
		{"ANDed in one string", func(db *gorm.DB) *gorm.DB { return db.Table("items").Where("name = ? AND id = ?", "x", 7) }, "items", []int64{7}},
		{"two Wheres", func(db *gorm.DB) *gorm.DB { return db.Table("items").Where("name = ?", "x").Where("id = ?", 8) }, "items", []int64{8}},
		{"map condition", func(db *gorm.DB) *gorm.DB { return db.Table("items").Where(map[string]any{"id": 9}) }, "items", []int64{9}},
		{"alias", func(db *gorm.DB) *gorm.DB { return db.Table("items i").Where("i.id = ?", 3) }, "items", []int64{3}},
		{"literal", func(db *gorm.DB) *gorm.DB { return db.Table("items").Where("id = 4") }, "items", []int64{4}},
		{"OR", func(db *gorm.DB) *gorm.DB { return db.Table("items").Where("id = ? OR id = ?", 1, 2) }, "items", nil},
		{"Or()", func(db *gorm.DB) *gorm.DB { return db.Table("items").Where("id = ?", 1).Or("id = ?", 2) }, "items", nil},
		{"Not()", func(db *gorm.DB) *gorm.DB { return db.Table("items").Not("id = ?", 1) }, "items", nil},
		{"a range", func(db *gorm.DB) *gorm.DB { return db.Table("items").Where("id > ?", 1) }, "items", nil},
		{"another column", func(db *gorm.DB) *gorm.DB { return db.Table("items").Where("name = ?", "x") }, "items", nil},
		{"a string value", func(db *gorm.DB) *gorm.DB { return db.Table("items").Where("id = ?", "5") }, "items", nil},
		{"a float value", func(db *gorm.DB) *gorm.DB { return db.Table("items").Where("id = ?", 5.0) }, "items", nil},
		{"a subquery", func(db *gorm.DB) *gorm.DB {
			return db.Table("items").Where("id IN (?)", db.Table("items").Select("id").Where("id = ?", 1))
		}, "items", nil},
		{"no WHERE", func(db *gorm.DB) *gorm.DB { return db.Table("items") }, "items", nil},
		{"a table without a known key", func(db *gorm.DB) *gorm.DB { return db.Table("others").Where("id = ?", 1) }, "others", nil},
		{"a configured column", func(db *gorm.DB) *gorm.DB { return db.Table("parts").Where("item_id = ?", 6) }, "parts", []int64{6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rows []map[string]any
			stmt := tc.query(db).Find(&rows).Statement
			if stmt.Schema != nil {
				t.Fatal("the statement has a model")
			}
			names, ok := p.keyedReadNames(stmt, tc.table)
			if tc.want == nil {
				if ok {
					t.Fatalf("%s keyed: %v", stmt.SQL.String(), names)
				}
				return
			}
			if !ok {
				t.Fatalf("%s not keyed", stmt.SQL.String())
			}
			col := "id"
			if tc.table == "parts" {
				col = "item_id"
			}
			for _, k := range tc.want {
				if !slices.Contains(names, lsnstore.KeyName(tc.table, col, k)) {
					t.Errorf("%s: names %v lack key %d", stmt.SQL.String(), names, k)
				}
			}
			if !slices.Contains(names, lsnstore.UnkeyedName(tc.table)) {
				t.Errorf("names %v lack the unkeyed position", names)
			}
		})
	}
}

// TestTableKeyedWrites: an Update or Delete through db.Table is keyed
// from the SQL GORM built when its WHERE pins the primary key.
func TestTableKeyedWrites(t *testing.T) {
	p := catalogPlugin(map[string]string{"items": "id"})
	db := dryDB(t)
	for _, tc := range []struct {
		name  string
		write func(*gorm.DB) *gorm.DB
		want  []int64 // nil: proves nothing
	}{
		{"Update by key", func(db *gorm.DB) *gorm.DB { return db.Table("items").Where("id = ?", 5).Update("name", "x") }, []int64{5}},
		{"Updates by keys", func(db *gorm.DB) *gorm.DB {
			return db.Table("items").Where("id IN ?", []int{5, 6}).Updates(map[string]any{"name": "x"})
		}, []int64{5, 6}},
		{"Delete by key", func(db *gorm.DB) *gorm.DB { return db.Table("items").Where("id = ?", 5).Delete(map[string]any{}) }, []int64{5}},
		{"Update of the key", func(db *gorm.DB) *gorm.DB { return db.Table("items").Where("id = ?", 5).Update("id", 6) }, nil},
		{"Update without a key", func(db *gorm.DB) *gorm.DB { return db.Table("items").Where("name = ?", "x").Update("name", "y") }, nil},
		{"Update with OR", func(db *gorm.DB) *gorm.DB {
			return db.Table("items").Where("id = ? OR name = ?", 5, "x").Update("name", "y")
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx := tc.write(db.Session(&gorm.Session{AllowGlobalUpdate: true, SkipDefaultTransaction: true}))
			if tx.Error != nil {
				t.Fatal(tx.Error)
			}
			kw, ok := p.keyable(tx, "items")
			if !ok || !kw.fromSQL || kw.pk.name != "id" {
				t.Fatalf("keyable = %+v, %v", kw, ok)
			}
			names, ok := p.builtWriteNames(tx.Statement, kw)
			if tc.want == nil {
				if ok {
					t.Fatalf("%s proved keys: %v", tx.Statement.SQL.String(), names)
				}
				return
			}
			if !ok || names[0] != p.signedTable("items", kw.sig) {
				t.Fatalf("%s: %v, %v", tx.Statement.SQL.String(), names, ok)
			}
			for _, k := range tc.want {
				if !slices.Contains(names, lsnstore.KeyName("items", "id", k)) {
					t.Errorf("%s: names %v lack key %d", tx.Statement.SQL.String(), names, k)
				}
			}
		})
	}
}

// TestCatalogKeySignature: a process that knows a table's primary key
// from the catalog signs it as one that learnt it from a model does, so
// processes sharing a store agree (keys_signature.go).
func TestCatalogKeySignature(t *testing.T) {
	fromCatalog := catalogPlugin(map[string]string{"customers": "id"})
	fromModel := catalogPlugin(nil)
	db := dryDB(t).Session(&gorm.Session{SkipDefaultTransaction: true})
	tableWrite := db.Table("customers").Where("id = ?", 1).Update("name", "x")
	catalogWrite, ok := fromCatalog.keyable(tableWrite, "customers")
	if !ok {
		t.Fatal("a db.Table write is not keyable with the catalog's key")
	}
	modelWrite, ok := fromModel.keyable(db.Model(&Customer{ID: 1}).Update("name", "x"), "customers")
	if !ok || modelWrite.fromSQL {
		t.Fatalf("a model write: %+v, %v", modelWrite, ok)
	}
	if catalogWrite.sig != modelWrite.sig {
		t.Fatalf("signatures differ: catalog %q, model %q", catalogWrite.sig, modelWrite.sig)
	}
	// Without a key from either, a db.Table write is not keyed.
	if kw, ok := fromModel.keyable(db.Table("others").Where("id = ?", 1).Update("x", 1), "others"); ok {
		t.Fatalf("a db.Table write of a table without a known key is keyed: %+v", kw)
	}
}

// TestKeysAfterQueryExecMode: a leading pgx.QueryExecMode argument is an
// option, not $1: the keys are the arguments after it.
func TestKeysAfterQueryExecMode(t *testing.T) {
	p := catalogPlugin(map[string]string{"items": "id"})
	c := p.classify("UPDATE items SET version = $1 WHERE id = $2")
	tn := p.tableNames("items")
	sig := p.signatureOf(tn, "items", intKey("id"))
	names, ok := p.pinnedWriteNames(c.pinned, "items", intKey("id"), sig, []any{pgx.QueryExecModeSimpleProtocol, 7, 5})
	if !ok || !slices.Contains(names, lsnstore.KeyName("items", "id", 5)) || slices.Contains(names, lsnstore.KeyName("items", "id", 7)) {
		t.Fatalf("write names %v, %v; want key 5", names, ok)
	}
	r := p.classify("SELECT * FROM items WHERE id = $1")
	names, ok = p.rawKeyedReadNames(context.Background(), r.pinned, "items", []any{pgx.QueryExecModeExec, 9})
	if !ok || !slices.Contains(names, lsnstore.KeyName("items", "id", 9)) {
		t.Fatalf("read names %v, %v; want key 9", names, ok)
	}
}
