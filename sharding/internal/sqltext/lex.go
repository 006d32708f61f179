package sqltext

import (
	"strconv"
	"strings"
)

// Kind is the kind of a token.
type Kind uint8

const (
	Ident Kind = iota + 1 // identifier or keyword (lower-cased unless quoted)
	Number
	String
	Param // ? (positional, in order) or $n
	Op    // operators and punctuation: = <> ( ) , etc.
)

// Tok is one token of SQL text.
type Tok struct {
	Kind   Kind
	Text   string // lower-cased for unquoted identifiers
	Quoted bool
	Param  int // Param tokens: index into the variables (-1 for "?": next)
	// Pos, End: the token's bytes in the text (raw IN splitting).
	Pos, End int
}

// Lex splits SQL text into tokens: identifiers (dotted names joined),
// numbers, strings, parameters and operators; comments are skipped.
func Lex(s string) []Tok {
	var out []Tok
	for i := 0; i < len(s); {
		c := s[i]
		start, n0 := i, len(out)
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				return out
			}
			i += j + 4
		case c == '\'':
			j := i + 1
			for j < len(s) {
				if s[j] == '\'' {
					if j+1 < len(s) && s[j+1] == '\'' {
						j += 2
						continue
					}
					break
				}
				j++
			}
			out = append(out, Tok{Kind: String, Text: s[i+1 : min(j, len(s))]})
			i = j + 1
		case c == '"' || c == '`':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return out
			}
			out = appendIdent(out, s[i+1:i+1+j], true)
			i += j + 2
		case c == '?':
			out = append(out, Tok{Kind: Param, Param: -1, Text: "?"})
			i++
		case c == '$' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			j := i + 1
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			n, _ := strconv.Atoi(s[i+1 : j])
			out = append(out, Tok{Kind: Param, Param: n - 1, Text: s[i:j]})
			i = j
		case c >= '0' && c <= '9':
			j := i
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.' || s[j] == 'e' || s[j] == 'E') {
				j++
			}
			out = append(out, Tok{Kind: Number, Text: s[i:j]})
			i = j
		case isIdentByte(c):
			j := i
			for j < len(s) && (isIdentByte(s[j]) || s[j] >= '0' && s[j] <= '9' || s[j] == '$') {
				j++
			}
			out = appendIdent(out, strings.ToLower(s[i:j]), false)
			i = j
		case c == '.':
			out = append(out, Tok{Kind: Op, Text: "."})
			i++
		default:
			j := i + 1
			if j < len(s) {
				switch s[i : j+1] {
				case "<>", "!=", "<=", ">=", "::", "||":
					j++
				}
			}
			out = append(out, Tok{Kind: Op, Text: s[i:j]})
			i = j
		}
		switch n := len(out); {
		case n > n0:
			out[n-1].Pos, out[n-1].End = start, i
		case n == n0-1 && n > 0: // a dotted name joined to the one before
			out[n-1].End = i
		}
	}
	return out
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// appendIdent joins dotted names (schema.table.column) into one token whose
// text is the full dotted name.
func appendIdent(out []Tok, name string, quoted bool) []Tok {
	if n := len(out); n >= 2 && out[n-1].Kind == Op && out[n-1].Text == "." && out[n-2].Kind == Ident {
		out[n-2].Text += "." + name
		out[n-2].Quoted = out[n-2].Quoted || quoted
		return out[:n-1]
	}
	return append(out, Tok{Kind: Ident, Text: name, Quoted: quoted})
}

// Is reports whether t is the unquoted word (a keyword, lower case).
func (t Tok) Is(word string) bool { return t.Kind == Ident && !t.Quoted && t.Text == word }

// IsOp reports whether t is the operator or punctuation s.
func (t Tok) IsOp(s string) bool { return t.Kind == Op && t.Text == s }
