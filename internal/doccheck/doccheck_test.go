package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const root = "../.."

// normalize drops blank lines and each line's surrounding spaces, so that a
// snippet matches an example body whatever its indentation.
func normalize(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// walkGoFiles calls fn with every .go file of the repository (outside
// hidden, testdata and vendor directories) and its text.
func walkGoFiles(t *testing.T, fn func(path string, src []byte) error) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return fn(path, src)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// exampleBodies returns the normalized body of every Example function in
// the repository's test files, by file:function.
func exampleBodies(t *testing.T) map[string]string {
	t.Helper()
	bodies := map[string]string{}
	walkGoFiles(t, func(path string, src []byte) error {
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Example") {
				continue
			}
			body := src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset]
			bodies[path+":"+fn.Name.Name] = normalize(string(body))
		}
		return nil
	})
	return bodies
}

// goBlocks returns the ```go blocks of a Markdown text with the line each
// starts on.
func goBlocks(text string) (blocks []string, lines []int) {
	var cur []string
	in := false
	start := 0
	for i, l := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case !in && trimmed == "```go":
			in, cur, start = true, nil, i+2
		case in && trimmed == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n"))
			lines = append(lines, start)
		case in:
			cur = append(cur, l)
		}
	}
	return blocks, lines
}

func TestGuideSnippetsAreExamples(t *testing.T) {
	bodies := exampleBodies(t)
	if len(bodies) == 0 {
		t.Fatal("no Example function found under " + root)
	}
	programs := programFiles(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "guide", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(root, "README.md"))
	checked := 0
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		blocks, lines := goBlocks(string(text))
		for i, b := range blocks {
			checked++
			nb := normalize(b)
			if strings.HasPrefix(nb, "package ") {
				// A whole program: the text of a file the repository
				// builds (go build and go vet compile it).
				if !programs[nb] {
					t.Errorf("%s:%d: this go block is a whole file but no .go file of the repository has this text; copy it from the program it shows:\n%s", page, lines[i], b)
				}
				continue
			}
			found := false
			for _, body := range bodies {
				// Whole lines only: a snippet may be part of a body, not
				// part of a line.
				if nb != "" && strings.Contains("\n"+body+"\n", "\n"+nb+"\n") {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s:%d: this go block is not (part of) the body of any Example function; copy it from the example it shows, or add one:\n%s", page, lines[i], b)
			}
		}
	}
	if checked == 0 {
		t.Error("no go block found in docs/guide/*.md or README.md")
	}
}

// programFiles returns the normalized text of every package main file of
// the repository that is not a test, for the guide's whole programs.
func programFiles(t *testing.T) map[string]bool {
	t.Helper()
	files := map[string]bool{}
	walkGoFiles(t, func(path string, src []byte) error {
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		// The guide shows a program from its package clause on: its doc
		// comment is the repository's.
		text := string(src)
		if i := strings.Index(text, "\npackage main\n"); i >= 0 {
			files[normalize(text[i+1:])] = true
		} else if strings.HasPrefix(text, "package main\n") {
			files[normalize(text)] = true
		}
		return nil
	})
	return files
}
