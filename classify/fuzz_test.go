package classify

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// endsInLineComment reports whether sql ends inside a line comment (-- or,
// for MySQL, #): a suffix appended on the same line is then legitimately
// part of the comment.
func endsInLineComment(d Dialect, sql string) bool {
	probe := sql + "\x00probe"
	var toks []token
	var err error
	if d == MySQL {
		toks, err = lexMySQL(probe, nil)
	} else {
		toks, err = lexPostgres(probe, nil)
	}
	if err != nil {
		return false
	}
	for _, t := range toks {
		if t.pos >= len(sql) {
			return false // the probe produced a token: not in a comment
		}
	}
	return true
}

func fuzzSeeds(f *testing.F) {
	for _, d := range []Dialect{Postgres, MySQL} {
		data, err := os.ReadFile(filepath.Join("testdata", "corpus", "classify_"+d.String()+".tsv"))
		if err != nil {
			f.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			cols := strings.Split(line, "\t")
			if len(cols) >= 2 {
				f.Add(uint8(d), cols[1])
			}
		}
	}
	for _, s := range []string{"SELECT 'x", "SELECT /* x", "SELECT $a$ x", "SELECT `x", `SELECT "x`,
		"SELECT 1 -- x", "SELECT 1 # x", "SELECT 1 /*! x", "SELECT (", "SELECT )", "WITH x AS (", "E'\\'",
		"INSERT INTO t (a, b) VALUES (1, $1), (?, f(2, 3)) ON CONFLICT (a) DO UPDATE SET b = 1 RETURNING a"} {
		f.Add(uint8(0), s)
		f.Add(uint8(1), s)
	}
}

// FuzzClassify checks, for both dialects, that Classify never panics and
// that appending a DELETE statement never yields READ.
func FuzzClassify(f *testing.F) {
	fuzzSeeds(f)
	cs := []*Classifier{New(Config{Dialect: Postgres, CacheSize: -1}), New(Config{Dialect: MySQL, CacheSize: -1})}
	f.Fuzz(func(t *testing.T, dialect uint8, sql string) {
		d := Dialect(dialect % 2)
		c := cs[d]
		r := c.Classify(sql)
		if r.Kind < Read || r.Kind > Write {
			t.Fatalf("invalid kind %d", r.Kind)
		}
		if r.Kind != Write && r.Reason != "" {
			t.Fatalf("reason %q on %v", r.Reason, r.Kind)
		}
		// Pinned never panics (Classify would hide it as "unparseable")
		// and names the table read or written.
		c.pinnedOf(sql, Read)
		c.pinnedOf(sql, Write)
		if pn := r.Pinned; pn != nil {
			tables := r.Reads
			if r.Kind == Write {
				tables = r.Writes
			}
			if !slices.Contains(tables, pn.Table) {
				t.Fatalf("%v: %q pins table %q, not among %v", d, sql, pn.Table, tables)
			}
		}
		// On a new line the suffix always escapes a trailing line comment.
		// (It may be BUFFER: the input may create a temporary table t.)
		if got := c.Classify(sql + "\n; DELETE FROM t"); got.Kind == Read {
			t.Fatalf("%v: %q + newline DELETE classified %v", d, sql, got.Kind)
		}
		if got := c.Classify(sql + "; DELETE FROM t"); got.Kind == Read && !endsInLineComment(d, sql) {
			t.Fatalf("%v: %q + DELETE classified READ", d, sql)
		}
	})
}
