package plugin

import (
	"maps"
	"testing"

	"github.com/freshread/freshread/classify"
)

func TestSingleIntegerKeys(t *testing.T) {
	pg := []pkColumn{
		{"public", "items", "id", "int8"},
		{"public", "parts", "id", "int4"},
		{"public", "pairs", "a", "int4"}, // composite
		{"public", "pairs", "b", "int4"},
		{"public", "codes", "code", "text"}, // not an integer
		{"public", "Quoted", "ID", "int2"},  // normalized name, column as spelt
		{"public", "dup", "id", "int8"},     // the same key in two schemas
		{"audit", "dup", "id", "int4"},
		{"public", "clash", "id", "int8"}, // two keys for one name
		{"audit", "clash", "ref", "int8"},
		{"public", "mixed", "id", "int8"}, // one schema's key is composite
		{"audit", "mixed", "id", "int8"},
		{"audit", "mixed", "at", "int8"},
	}
	want := map[string]string{"items": "id", "parts": "id", "quoted": "ID", "dup": "id"}
	if got := singleIntegerKeys(pg, classify.Postgres); !maps.Equal(got, want) {
		t.Errorf("PostgreSQL: %v, want %v", got, want)
	}
	my := []pkColumn{
		{"app", "items", "ID", "bigint"}, // MySQL names ignore case
		{"app", "flags", "id", "tinyint"},
		{"app", "notes", "id", "INT"},
		{"app", "prices", "id", "decimal"},
		{"app", "Users", "id", "int"}, // two tables, one name
		{"app", "users", "uid", "int"},
	}
	want = map[string]string{"items": "id", "flags": "id", "notes": "id"}
	if got := singleIntegerKeys(my, classify.MySQL); !maps.Equal(got, want) {
		t.Errorf("MySQL: %v, want %v", got, want)
	}
}
