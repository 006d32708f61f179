package reshard

import (
	"fmt"
	"strconv"
	"strings"
)

// The output of PostgreSQL's built-in test_decoding plugin, one row per
// change (contrib/test_decoding/test_decoding.c, PostgreSQL 14 to 17, with
// include-xids on: the mover waits until the decoded transactions are
// visible before it re-reads their rows):
//
//	BEGIN 1234
//	table public.orders: INSERT: id[bigint]:1 user_id[bigint]:7 note[text]:'it''s' tags[text[]]:null
//	table public.orders: UPDATE: id[bigint]:1 ...                       (key unchanged, REPLICA IDENTITY DEFAULT)
//	table public.orders: UPDATE: old-key: id[bigint]:1 new-tuple: id[bigint]:2 ...
//	table public.orders: DELETE: id[bigint]:1
//	table public.orders: DELETE: (no-tuple-data)
//	table public.orders, public.order_items: TRUNCATE: (no-flags)
//	message: transactional: 1 prefix: x, sz: 3 content:abc
//	COMMIT 1234
//
// Identifiers are quote_identifier'd (double quotes, "" inside), types are
// format_type names (which may hold spaces and brackets: "timestamp with
// time zone", "integer[]"), and values are the type's output text, bare for
// integers, floats, numeric and booleans (true/false), B'...' for bit
// strings, 'single-quoted' with '' inside for everything else, or null or
// unchanged-toast-datum. The mover only needs the primary key columns of
// each change, so values are kept as text, unescaped.

// change is one decoded row.
type change struct {
	kind   changeKind
	tables []relName // one, or several for a TRUNCATE
	// oldKey is the old tuple of an UPDATE that changed its replica
	// identity, or of a DELETE; newTuple the new tuple of an INSERT or
	// UPDATE. nil when absent (no-tuple-data).
	oldKey, newTuple []field
	// xid is a COMMIT's transaction id (32 bits, as printed); 0 when the
	// row has none.
	xid uint32
}

type changeKind int

const (
	changeOther changeKind = iota // BEGIN, a message: nothing to apply
	changeCommit
	changeInsert
	changeUpdate
	changeDelete
	changeTruncate
)

// relName is a table as decoded: schema and name, unquoted.
type relName struct{ schema, name string }

func (r relName) String() string { return r.schema + "." + r.name }

// field is one column of a decoded tuple.
type field struct {
	name  string // unquoted
	typ   string // format_type name
	null  bool
	toast bool // unchanged-toast-datum: the value is not in the WAL record
	val   string
}

// errDecode wraps ErrDecode with the offending row.
func errDecode(data, why string) error {
	if len(data) > 200 {
		data = data[:200] + "..."
	}
	return fmt.Errorf("%w: %s in %q", ErrDecode, why, data)
}

// parseChange parses one row of test_decoding output.
func parseChange(data string) (change, error) {
	switch {
	case data == "BEGIN" || strings.HasPrefix(data, "BEGIN "):
		return change{kind: changeOther}, nil
	case data == "COMMIT":
		return change{kind: changeCommit}, nil
	case strings.HasPrefix(data, "COMMIT "):
		xid, err := strconv.ParseUint(strings.TrimPrefix(data, "COMMIT "), 10, 32)
		if err != nil || xid == 0 {
			return change{}, errDecode(data, "malformed transaction id")
		}
		return change{kind: changeCommit, xid: uint32(xid)}, nil
	case strings.HasPrefix(data, "message:"):
		return change{kind: changeOther}, nil
	case !strings.HasPrefix(data, "table "):
		return change{}, errDecode(data, "unknown row")
	}
	p := &parser{s: data, i: len("table ")}
	var c change
	for {
		r, err := p.relName()
		if err != nil {
			return change{}, errDecode(data, err.Error())
		}
		c.tables = append(c.tables, r)
		if !p.skip(", ") {
			break
		}
	}
	if !p.skip(": ") {
		return change{}, errDecode(data, "no ': ' after the table name")
	}
	op := p.until(':')
	if !p.skip(":") {
		return change{}, errDecode(data, "no ':' after the operation")
	}
	var err error
	switch op {
	case "INSERT":
		c.kind = changeInsert
		c.newTuple, err = p.tuple()
	case "UPDATE":
		c.kind = changeUpdate
		if p.skip(" old-key:") {
			if c.oldKey, err = p.tuple(); err != nil {
				break
			}
			if !p.skip(" new-tuple:") {
				err = fmt.Errorf("no new-tuple after old-key")
				break
			}
		}
		c.newTuple, err = p.tuple()
	case "DELETE":
		c.kind = changeDelete
		c.oldKey, err = p.tuple()
	case "TRUNCATE":
		c.kind = changeTruncate
		return c, nil
	default:
		return change{}, errDecode(data, "unknown operation "+op)
	}
	if err != nil {
		return change{}, errDecode(data, err.Error())
	}
	if p.i != len(p.s) {
		return change{}, errDecode(data, fmt.Sprintf("trailing text at byte %d", p.i))
	}
	return c, nil
}

type parser struct {
	s string
	i int
}

func (p *parser) skip(prefix string) bool {
	if strings.HasPrefix(p.s[p.i:], prefix) {
		p.i += len(prefix)
		return true
	}
	return false
}

// until returns the text up to (not including) the next b, or the rest.
func (p *parser) until(b byte) string {
	j := strings.IndexByte(p.s[p.i:], b)
	if j < 0 {
		j = len(p.s) - p.i
	}
	out := p.s[p.i : p.i+j]
	p.i += j
	return out
}

// ident reads one identifier: "quoted" ("" inside) or bare up to one of
// the stop bytes.
func (p *parser) ident(stop string) (string, error) {
	if p.i < len(p.s) && p.s[p.i] == '"' {
		var b strings.Builder
		for j := p.i + 1; j < len(p.s); j++ {
			if p.s[j] != '"' {
				b.WriteByte(p.s[j])
				continue
			}
			if j+1 < len(p.s) && p.s[j+1] == '"' {
				b.WriteByte('"')
				j++
				continue
			}
			p.i = j + 1
			return b.String(), nil
		}
		return "", fmt.Errorf("unterminated quoted identifier")
	}
	j := p.i
	for j < len(p.s) && !strings.ContainsRune(stop, rune(p.s[j])) {
		j++
	}
	if j == p.i {
		return "", fmt.Errorf("empty identifier at byte %d", p.i)
	}
	out := p.s[p.i:j]
	p.i = j
	return out, nil
}

// relName reads schema.name.
func (p *parser) relName() (relName, error) {
	schema, err := p.ident(".:, ")
	if err != nil {
		return relName{}, err
	}
	if !p.skip(".") {
		return relName{}, fmt.Errorf("table name without a schema")
	}
	name, err := p.ident(":, ")
	if err != nil {
		return relName{}, err
	}
	return relName{schema, name}, nil
}

// tuple reads " name[type]:value" fields up to the end of the row or a
// bare new-tuple: marker; " (no-tuple-data)" is a nil tuple.
func (p *parser) tuple() ([]field, error) {
	if p.skip(" (no-tuple-data)") {
		return nil, nil
	}
	fields := []field{}
	for p.i < len(p.s) {
		if strings.HasPrefix(p.s[p.i:], " new-tuple:") {
			return fields, nil
		}
		if !p.skip(" ") {
			return nil, fmt.Errorf("no space before a column at byte %d", p.i)
		}
		var f field
		var err error
		if f.name, err = p.ident("["); err != nil {
			return nil, err
		}
		if !p.skip("[") {
			return nil, fmt.Errorf("no type after column %q", f.name)
		}
		j := strings.Index(p.s[p.i:], "]:")
		if j < 0 {
			return nil, fmt.Errorf("unterminated type of column %q", f.name)
		}
		f.typ = p.s[p.i : p.i+j]
		p.i += j + 2
		if err := p.value(&f); err != nil {
			return nil, fmt.Errorf("column %q: %w", f.name, err)
		}
		fields = append(fields, f)
	}
	return fields, nil
}

// value reads a field's value.
func (p *parser) value(f *field) error {
	rest := p.s[p.i:]
	switch {
	case rest == "" || rest[0] == ' ':
		return fmt.Errorf("empty value")
	case rest[0] == '\'':
		v, n, err := quoted(rest)
		if err != nil {
			return err
		}
		f.val, p.i = v, p.i+n
	case strings.HasPrefix(rest, "B'"):
		v, n, err := quoted(rest[1:])
		if err != nil {
			return err
		}
		f.val, p.i = v, p.i+1+n
	default:
		j := strings.IndexByte(rest, ' ')
		if j < 0 {
			j = len(rest)
		}
		word := rest[:j]
		p.i += j
		switch word {
		case "null":
			f.null = true
		case "unchanged-toast-datum":
			f.toast = true
		default:
			f.val = word
		}
	}
	return nil
}

// quoted reads a single-quoted literal (a quote inside is doubled) at the start of s
// and returns its text and length.
func quoted(s string) (string, int, error) {
	var b strings.Builder
	for j := 1; j < len(s); j++ {
		if s[j] != '\'' {
			b.WriteByte(s[j])
			continue
		}
		if j+1 < len(s) && s[j+1] == '\'' {
			b.WriteByte('\'')
			j++
			continue
		}
		return b.String(), j + 1, nil
	}
	return "", 0, fmt.Errorf("unterminated quoted value")
}

// keyOf returns the values of cols (unquoted names) in fields, in order;
// ok is false when one is missing, null or not in the record (toast).
func keyOf(fields []field, cols []string) (vals []string, ok bool) {
	vals = make([]string, len(cols))
	for i, c := range cols {
		found := false
		for _, f := range fields {
			if f.name == c {
				if f.null || f.toast {
					return nil, false
				}
				vals[i], found = f.val, true
				break
			}
		}
		if !found {
			return nil, false
		}
	}
	return vals, true
}
