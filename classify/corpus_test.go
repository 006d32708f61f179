package classify

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type corpusRow struct {
	dialect Dialect
	file    string
	line    int
	want    Kind
	sql     string
	source  string
	note    string
}

// unescapeCorpus applies the corpus escaping rules: \n and \t stand for a
// newline or TAB only in rows whose note says has-newline / has-tab.
func unescapeCorpus(sql, note string) string {
	if strings.Contains(note, "has-newline") {
		sql = strings.ReplaceAll(sql, `\n`, "\n")
	}
	if strings.Contains(note, "has-tab") {
		sql = strings.ReplaceAll(sql, `\t`, "\t")
	}
	return sql
}

func loadCorpus(t testing.TB, d Dialect) []corpusRow {
	t.Helper()
	file := filepath.Join("testdata", "corpus", "classify_"+d.String()+".tsv")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("read corpus: %v", err)
	}
	var rows []corpusRow
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if text == "" {
			continue
		}
		cols := strings.Split(text, "\t")
		if len(cols) < 3 {
			t.Fatalf("%s:%d: want at least 3 columns, got %d", file, line, len(cols))
		}
		want, err := ParseKind(cols[0])
		if err != nil {
			t.Fatalf("%s:%d: %v", file, line, err)
		}
		note := ""
		if len(cols) > 3 {
			note = cols[3]
		}
		rows = append(rows, corpusRow{dialect: d, file: file, line: line, want: want,
			sql: unescapeCorpus(cols[1], note), source: cols[2], note: note})
	}
	return rows
}

type exception struct {
	dialect  string
	sql      string
	expected string
	got      string
	reason   string
	used     bool
}

// loadExceptions reads testdata/exceptions.tsv: dialect, SQL (escaped like
// the corpus: \n and \t), expected, got, reason.
func loadExceptions(t testing.TB) map[string]*exception {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "exceptions.tsv"))
	if err != nil {
		t.Fatalf("read exceptions: %v", err)
	}
	m := make(map[string]*exception)
	for i, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 5 {
			t.Fatalf("exceptions.tsv:%d: want 5 columns, got %d", i+1, len(cols))
		}
		e := &exception{dialect: cols[0], sql: cols[1], expected: cols[2], got: cols[3], reason: cols[4]}
		if strings.TrimSpace(e.reason) == "" {
			t.Fatalf("exceptions.tsv:%d: empty reason", i+1)
		}
		m[e.dialect+"\x00"+e.sql] = e
	}
	return m
}

func escapeForExceptions(sql string) string {
	return strings.NewReplacer("\n", `\n`, "\t", `\t`).Replace(sql)
}

// TestCorpus is the conformance suite: no WRITE row may be classified READ,
// agreement must be at least 97 % per dialect, and every disagreement must
// be listed in testdata/exceptions.tsv (and every listed exception must
// still disagree).
func TestCorpus(t *testing.T) {
	exc := loadExceptions(t)
	for _, d := range []Dialect{Postgres, MySQL} {
		rows := loadCorpus(t, d)
		c := New(Config{Dialect: d, CacheSize: -1})
		agree, txnEnd := 0, 0
		for _, r := range rows {
			got := c.Classify(r.sql)
			if strings.Contains(r.note, "policy:txn-end") {
				txnEnd++
			}
			if r.want == Write && got.Kind == Read {
				t.Errorf("%s:%d: WRITE row classified READ: %q", r.file, r.line, r.sql)
			}
			if got.Kind == r.want {
				agree++
				continue
			}
			key := d.String() + "\x00" + escapeForExceptions(r.sql)
			e, ok := exc[key]
			if !ok {
				t.Errorf("%s:%d: unlisted disagreement: want %v, got %v (reason %q); to list it:\n\t%s",
					r.file, r.line, r.want, got.Kind, got.Reason, formatException(d, r.sql, r.want, got.Kind, "<reason>"))
				continue
			}
			e.used = true
			if e.expected != r.want.String() || e.got != got.Kind.String() {
				t.Errorf("exception for %q lists %s/%s, now %v/%v", r.sql, e.expected, e.got, r.want, got.Kind)
			}
		}
		pct := 100 * float64(agree) / float64(len(rows))
		t.Logf("%s: %d/%d rows agree (%.2f %%); %d rows tagged policy:txn-end", d, agree, len(rows), pct, txnEnd)
		if pct < 97 {
			t.Errorf("%s: agreement %.2f %% < 97 %%", d, pct)
		}
	}
	for _, e := range exc {
		if !e.used {
			t.Errorf("listed exception no longer disagrees (remove it): %s %q", e.dialect, e.sql)
		}
	}
}

// TestCorpusCopyIsCurrent compares the copy in testdata/corpus with the
// shared corpus when the latter exists (it does not on a clean clone).
func TestCorpusCopyIsCurrent(t *testing.T) {
	for _, name := range []string{"classify_postgres.tsv", "classify_mysql.tsv"} {
		shared, err := os.ReadFile(filepath.Join("..", "..", "shared", "corpus", name))
		if err != nil {
			t.Skipf("shared corpus not available: %v", err)
		}
		local, err := os.ReadFile(filepath.Join("testdata", "corpus", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(shared, local) {
			t.Errorf("testdata/corpus/%s differs from ../../shared/corpus/%s: copy it again", name, name)
		}
	}
}

// formatException is a line of exceptions.tsv.
func formatException(d Dialect, sql string, want, got Kind, reason string) string {
	return fmt.Sprintf("%s\t%s\t%v\t%v\t%s", d, escapeForExceptions(sql), want, got, reason)
}
