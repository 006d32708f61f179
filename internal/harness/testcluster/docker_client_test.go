package testcluster

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The protocol's types here are a copy of the container helper's (the two
// modules share no code): every type has the same JSON fields as its
// counterpart in internal/harness/containers/cmd/frcontainers.
func TestHelperProtocolMatchesTheHelpers(t *testing.T) {
	dir, err := helperModule()
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, "cmd", "frcontainers", "main.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	theirs := map[string][]string{} // type name: JSON field names
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return true
		}
		for _, fld := range st.Fields.List {
			if fld.Tag == nil {
				continue
			}
			tag, _ := strconv.Unquote(fld.Tag.Value)
			name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
			theirs[ts.Name.Name] = append(theirs[ts.Name.Name], name)
		}
		return false
	})
	for helper, ours := range map[string]any{
		"request":     helperRequest{},
		"runSpec":     runSpec{},
		"portBinding": portBinding{},
		"bind":        bindMount{},
		"buildSpec":   buildSpec{},
		"response":    helperResponse{},
		"state":       containerState{},
		"item":        labelled{},
	} {
		var fields []string
		typ := reflect.TypeOf(ours)
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			fields = append(fields, name)
		}
		slices.Sort(fields)
		want := slices.Sorted(slices.Values(theirs[helper]))
		if !slices.Equal(fields, want) {
			t.Errorf("%s has the JSON fields %v; the helper's %s has %v", typ.Name(), fields, helper, want)
		}
	}
}
