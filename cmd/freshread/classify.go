package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/freshread/freshread/classify"
)

func init() {
	register("classify", command{
		summary: "classify SQL statements read from stdin as READ, BUFFER or WRITE",
		run:     runClassify,
	})
}

// runClassify reads statements from stdin, one per line (NUL-separated with
// -0), and prints for each: kind TAB tables-read TAB tables-written, table
// lists comma-separated.
func runClassify(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("freshread classify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dialectName := fs.String("dialect", "postgres", "SQL dialect: postgres or mysql (mariadb)")
	nul := fs.Bool("0", false, "statements are separated by NUL bytes instead of newlines")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: freshread classify --dialect postgres|mysql [-0] < statements")
		fmt.Fprintln(stderr, "prints: KIND<TAB>tables read<TAB>tables written")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "freshread classify: unexpected arguments %q\n", fs.Args())
		return 2
	}
	d, err := classify.ParseDialect(*dialectName)
	if err != nil {
		fmt.Fprintf(stderr, "freshread classify: %v\n", err)
		return 2
	}
	c := classify.New(classify.Config{Dialect: d})
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 64*1024), 64*1024*1024)
	sep := byte('\n')
	if *nul {
		sep = 0
	}
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data, sep); i >= 0 {
			return i + 1, data[:i], nil
		}
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	})
	w := bufio.NewWriter(stdout)
	for sc.Scan() {
		sql := sc.Text()
		if !*nul {
			sql = strings.TrimSuffix(sql, "\r")
		}
		r := c.Classify(sql)
		fmt.Fprintf(w, "%s\t%s\t%s\n", r.Kind, strings.Join(r.Reads, ","), strings.Join(r.Writes, ","))
	}
	if err := sc.Err(); err != nil {
		w.Flush()
		fmt.Fprintf(stderr, "freshread classify: read input: %v\n", err)
		return 1
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintf(stderr, "freshread classify: write output: %v\n", err)
		return 1
	}
	return 0
}
