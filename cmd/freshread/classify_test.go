package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(t *testing.T, stdinFile string, args ...string) (string, string, int) {
	t.Helper()
	in, err := os.ReadFile(filepath.Join("testdata", stdinFile))
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := dispatch(args, bytes.NewReader(in), &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestClassifyPostgresLines(t *testing.T) {
	out, stderr, code := runCLI(t, "postgres.sql", "classify", "--dialect", "postgres")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	want := "READ\torders,users\t\n" +
		"WRITE\t\tusers\n" +
		"BUFFER\t\t\n" +
		"WRITE\t\tarchive,queue\n" +
		"WRITE\tjobs\t\n"
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}

func TestClassifyMySQLNul(t *testing.T) {
	out, stderr, code := runCLI(t, "mysql_nul.sql", "classify", "--dialect=mysql", "-0")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	want := "READ\tdb.t2,t1\t\n" +
		"BUFFER\tt1\t\n" +
		"WRITE\tt4\tt3\n"
	if out != want {
		t.Errorf("output:\n%q\nwant:\n%q", out, want)
	}
}

func TestDispatchErrors(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := dispatch([]string{"nope"}, nil, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "unknown subcommand") {
		t.Errorf("unknown subcommand: exit %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	if code := dispatch([]string{"classify", "--dialect", "oracle"}, strings.NewReader(""), &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "unknown dialect") {
		t.Errorf("bad dialect: exit %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	if code := dispatch(nil, nil, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "classify") {
		t.Errorf("no args: exit %d, stderr %q", code, errOut.String())
	}
}
