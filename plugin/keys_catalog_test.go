package plugin

import (
	"bytes"
	"log/slog"
	"maps"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/freshread/freshread/classify"
)

// TestCatalogKeyDefs: the catalog's primary keys that keys are named by:
// integer or uuid columns, one or several (composite, in the key's order).
func TestCatalogKeyDefs(t *testing.T) {
	pg := []pkColumn{
		{"public", "items", "id", "int8"},
		{"public", "parts", "id", "int4"},
		{"public", "pairs", "b", "int4"}, // composite, in the key's order
		{"public", "pairs", "a", "int4"},
		{"public", "lines", "order_id", "uuid"},
		{"public", "lines", "n", "int2"},
		{"public", "tagged", "id", "int8"}, // one column is not keyable
		{"public", "tagged", "tag", "text"},
		{"public", "codes", "code", "text"}, // not an integer
		{"public", "Quoted", "ID", "int2"},  // normalized name, column as spelt
		{"public", "dup", "id", "int8"},     // the same key in two schemas
		{"audit", "dup", "id", "int4"},
		{"public", "clash", "id", "int8"}, // two keys for one name
		{"audit", "clash", "ref", "int8"},
		{"public", "mixed", "id", "int8"}, // one schema's key is composite
		{"audit", "mixed", "id", "int8"},
		{"audit", "mixed", "at", "int8"},
		{"public", "tokens", "id", "uuid"},
		{"public", "typed", "id", "uuid"}, // one name, two types
		{"audit", "typed", "id", "int8"},
		{"public", "odd", "a,b", "int8"}, // a separator in the name
	}
	want := map[string]string{"items": "id", "parts": "id", "quoted": "ID", "dup": "id", "tokens": "id:uuid",
		"pairs": "b:int,a:int", "lines": "order_id:uuid,n:int"}
	if got := keySigs(catalogKeyDefs(pg, classify.Postgres)); !maps.Equal(got, want) {
		t.Errorf("PostgreSQL: %v, want %v", got, want)
	}
	my := []pkColumn{
		{"app", "items", "ID", "bigint"}, // MySQL names ignore case
		{"app", "flags", "id", "tinyint"},
		{"app", "notes", "id", "INT"},
		{"app", "prices", "id", "decimal"},
		{"app", "Users", "id", "int"}, // two tables, one name
		{"app", "users", "uid", "int"},
		{"app", "sessions", "Token", "uuid"}, // MariaDB's UUID type
	}
	want = map[string]string{"items": "id", "flags": "id", "notes": "id", "sessions": "token:uuid"}
	if got := keySigs(catalogKeyDefs(my, classify.MySQL)); !maps.Equal(got, want) {
		t.Errorf("MySQL: %v, want %v", got, want)
	}
}

// keySigs are keys' signature parts (a column, or columns with types).
func keySigs(keys map[string]*keyDef) map[string]string {
	out := make(map[string]string, len(keys))
	for t, k := range keys {
		out[t] = k.sig
	}
	return out
}

// TestModelKeyOverCatalog: once a model names another integer primary
// key than the catalog, the process keys the table by the model's (one
// signature per table) and says so once.
func TestModelKeyOverCatalog(t *testing.T) {
	p := catalogPlugin(map[string]string{"customers": "ref"})
	var log bytes.Buffer
	p.cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	tn := p.tableNames("customers")
	if k, _ := p.knownKey(tn, "customers"); k.name != "ref" {
		t.Fatalf("before the model: %q, want the catalog's", k)
	}
	db := dryDB(t).Session(&gorm.Session{SkipDefaultTransaction: true})
	for range 2 {
		if _, ok := p.keyable(db.Model(&Customer{ID: 1}).Update("name", "x"), "customers"); !ok {
			t.Fatal("a model write is not keyable")
		}
	}
	if k, _ := p.knownKey(tn, "customers"); k.name != "id" {
		t.Fatalf("after the model: %q, want the model's", k)
	}
	if n := strings.Count(log.String(), "not the table's primary key in the catalog"); n != 1 {
		t.Fatalf("%d warnings, want 1: %s", n, log.String())
	}
}
