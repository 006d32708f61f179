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
		pk("public", "items", "id", "int8"),
		pk("public", "parts", "id", "int4"),
		pk("public", "pairs", "b", "int4"), // composite, in the key's order
		pk("public", "pairs", "a", "int4"),
		pk("public", "lines", "order_id", "uuid"),
		pk("public", "lines", "n", "int2"),
		pk("public", "tagged", "id", "int8"), // an integer and a text column
		pk("public", "tagged", "tag", "text"),
		pk("public", "codes", "code", "text"), // deterministic text
		pk("public", "names", "name", "varchar"),
		pk("public", "fixed", "code", "bpchar"), // trailing spaces insignificant
		func() pkColumn { c := pk("public", "ci", "code", "text"); c.deterministic = false; return c }(),
		pk("public", "Quoted", "ID", "int2"), // normalized name, column as spelt
		pk("public", "dup", "id", "int8"),    // the same key in two schemas
		pk("audit", "dup", "id", "int4"),
		pk("public", "clash", "id", "int8"), // two keys for one name
		pk("audit", "clash", "ref", "int8"),
		pk("public", "mixed", "id", "int8"), // one schema's key is composite
		pk("audit", "mixed", "id", "int8"),
		pk("audit", "mixed", "at", "int8"),
		pk("public", "tokens", "id", "uuid"),
		pk("public", "typed", "id", "uuid"), // one name, two types
		pk("audit", "typed", "id", "int8"),
		pk("public", "odd", "a,b", "int8"), // a separator in the name
	}
	want := map[string]string{"items": "id", "parts": "id", "quoted": "ID", "dup": "id", "tokens": "id:uuid",
		"pairs": "b:int,a:int", "lines": "order_id:uuid,n:int", "codes": "code:text", "names": "name:text",
		"tagged": "id:int,tag:text"}
	if got := keySigs(catalogKeyDefs(pg, classify.Postgres)); !maps.Equal(got, want) {
		t.Errorf("PostgreSQL: %v, want %v", got, want)
	}
	my := []pkColumn{
		pk("app", "items", "ID", "bigint"), // MySQL names ignore case
		pk("app", "flags", "id", "tinyint"),
		pk("app", "notes", "id", "INT"),
		pk("app", "prices", "id", "decimal"),
		pk("app", "Users", "id", "int"), // two tables, one name
		pk("app", "users", "uid", "int"),
		pk("app", "sessions", "Token", "uuid"), // MariaDB's UUID type
		myText("codes", "varchar", "utf8mb4", "utf8mb4_bin"),
		myText("nopads", "char", "utf8mb4", "utf8mb4_nopad_bin"),
		myText("cis", "varchar", "utf8mb4", "utf8mb4_general_ci"), // ignores case
		myText("latins", "varchar", "latin1", "latin1_bin"),       // another character set
		myText("blobs", "varbinary", "", ""),
	}
	want = map[string]string{"items": "id", "flags": "id", "notes": "id", "sessions": "token:uuid",
		"codes": "code:text-pad", "nopads": "code:text-pad"}
	if got := keySigs(catalogKeyDefs(my, classify.MySQL)); !maps.Equal(got, want) {
		t.Errorf("MySQL: %v, want %v", got, want)
	}
}

// pk is a primary key column as a connection sending UTF-8 reads it, with
// a deterministic collation if any.
func pk(schema, table, column, dataType string) pkColumn {
	return pkColumn{schema: schema, table: table, column: column, dataType: dataType, deterministic: true, utf8Client: true}
}

// myText is a MariaDB text key column code.
func myText(table, dataType, charset, collation string) pkColumn {
	c := pk("app", table, "code", dataType)
	c.charset, c.collation = charset, collation
	return c
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
		t.Fatalf("before the model: %q, want the catalog's", k.name)
	}
	db := dryDB(t).Session(&gorm.Session{SkipDefaultTransaction: true})
	for range 2 {
		if _, ok := p.keyable(db.Model(&Customer{ID: 1}).Update("name", "x"), "customers"); !ok {
			t.Fatal("a model write is not keyable")
		}
	}
	if k, _ := p.knownKey(tn, "customers"); k.name != "id" {
		t.Fatalf("after the model: %q, want the model's", k.name)
	}
	if n := strings.Count(log.String(), "not the table's primary key in the catalog"); n != 1 {
		t.Fatalf("%d warnings, want 1: %s", n, log.String())
	}
}
