package classify

import "errors"

// tokKind is the kind of a lexical token shared by both dialect lexers.
type tokKind uint8

const (
	tIdent  tokKind = iota + 1 // unquoted identifier or keyword, lower-cased
	tQIdent                    // quoted identifier, verbatim (PostgreSQL) or lower-cased (MySQL)
	tString                    // string literal of any form
	tNumber                    // numeric literal
	tParam                     // placeholder: $1, ?, :name
	tVar                       // MySQL user (@x) or system (@@x) variable, lower-cased, without the @
	tSysVar                    // MySQL @@x
	tOp                        // operator or punctuation
)

type token struct {
	kind tokKind
	text string
	pos  int
}

func (t token) is(kw string) bool { return t.kind == tIdent && t.text == kw }
func (t token) op(s string) bool  { return t.kind == tOp && t.text == s }

var (
	errUnterminated = errors.New("classify: unterminated comment, string or quoted identifier")
	errUnbalanced   = errors.New("classify: unbalanced parentheses")
)

// splitStatements splits a token stream at semicolons, dropping empty
// statements.
func splitStatements(toks []token) [][]token {
	var out [][]token
	start := 0
	for i, t := range toks {
		if t.kind == tOp && t.text == ";" {
			if i > start {
				out = append(out, toks[start:i])
			}
			start = i + 1
		}
	}
	if start < len(toks) {
		out = append(out, toks[start:])
	}
	return out
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80
}

func isIdentChar(c byte) bool {
	return isIdentStart(c) || (c >= '0' && c <= '9') || c == '$'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// lowerASCII lower-cases ASCII letters, allocating only when needed.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
