package classify

import "strings"

// lexPostgres tokenizes PostgreSQL SQL. It handles -- and nested /* */
// comments, ” strings (standard_conforming_strings=on), E” strings with
// backslash escapes, B” X” N” U&” strings, dollar quoting, "quoted" and
// U&"quoted" identifiers, $n parameters and operators. An unterminated
// comment, string or quoted identifier is an error.
func lexPostgres(s string, toks []token) ([]token, error) {
	i, n := 0, len(s)
	for i < n {
		c := s[i]
		switch {
		case isSpace(c):
			i++
		case c == '-' && i+1 < n && s[i+1] == '-':
			for i < n && s[i] != '\n' && s[i] != '\r' {
				i++
			}
		case c == '/' && i+1 < n && s[i+1] == '*':
			depth := 1
			i += 2
			for depth > 0 {
				if i+1 >= n {
					return toks, errUnterminated
				}
				if s[i] == '*' && s[i+1] == '/' {
					depth--
					i += 2
				} else if s[i] == '/' && s[i+1] == '*' {
					depth++
					i += 2
				} else {
					i++
				}
			}
		case c == '\'':
			j, err := scanString(s, i+1, '\'', false)
			if err != nil {
				return toks, err
			}
			toks = append(toks, token{kind: tString, text: s[i:j], pos: i})
			i = j
		case c == '"':
			j, text, err := scanQuotedIdent(s, i+1, '"')
			if err != nil {
				return toks, err
			}
			toks = append(toks, token{kind: tQIdent, text: text, pos: i})
			i = j
		case c == '$':
			if i+1 < n && isDigit(s[i+1]) {
				j := i + 1
				for j < n && isDigit(s[j]) {
					j++
				}
				toks = append(toks, token{kind: tParam, text: s[i:j], pos: i})
				i = j
				continue
			}
			// Dollar quote: $tag$ ... $tag$ (tag may be empty).
			j := i + 1
			for j < n && isIdentChar(s[j]) && s[j] != '$' {
				j++
			}
			if j < n && s[j] == '$' && (j == i+1 || !isDigit(s[i+1])) {
				tag := s[i : j+1]
				end := strings.Index(s[j+1:], tag)
				if end < 0 {
					return toks, errUnterminated
				}
				k := j + 1 + end + len(tag)
				toks = append(toks, token{kind: tString, text: s[i:k], pos: i})
				i = k
				continue
			}
			toks = append(toks, token{kind: tOp, text: "$", pos: i})
			i++
		case isDigit(c) || (c == '.' && i+1 < n && isDigit(s[i+1])):
			j := scanNumber(s, i)
			toks = append(toks, token{kind: tNumber, text: s[i:j], pos: i})
			i = j
		case isIdentStart(c):
			j := i + 1
			for j < n && isIdentChar(s[j]) {
				j++
			}
			word := s[i:j]
			if j < n && s[j] == '\'' {
				switch lowerASCII(word) {
				case "e":
					k, err := scanString(s, j+1, '\'', true)
					if err != nil {
						return toks, err
					}
					toks = append(toks, token{kind: tString, text: s[i:k], pos: i})
					i = k
					continue
				case "b", "x", "n":
					k, err := scanString(s, j+1, '\'', false)
					if err != nil {
						return toks, err
					}
					toks = append(toks, token{kind: tString, text: s[i:k], pos: i})
					i = k
					continue
				}
			}
			if (word == "u" || word == "U") && j+1 < n && s[j] == '&' && (s[j+1] == '\'' || s[j+1] == '"') {
				if s[j+1] == '\'' {
					k, err := scanString(s, j+2, '\'', false)
					if err != nil {
						return toks, err
					}
					toks = append(toks, token{kind: tString, text: s[i:k], pos: i})
					i = k
				} else {
					k, text, err := scanQuotedIdent(s, j+2, '"')
					if err != nil {
						return toks, err
					}
					toks = append(toks, token{kind: tQIdent, text: text, pos: i})
					i = k
				}
				continue
			}
			toks = append(toks, token{kind: tIdent, text: lowerASCII(word), pos: i})
			i = j
		case c == '(' || c == ')' || c == '[' || c == ']' || c == ',' || c == ';' || c == '.':
			toks = append(toks, token{kind: tOp, text: s[i : i+1], pos: i})
			i++
		case c == ':' && i+1 < n && s[i+1] == ':':
			toks = append(toks, token{kind: tOp, text: "::", pos: i})
			i += 2
		default:
			// Operators: a run of operator characters. Comment starts end
			// an operator, as in PostgreSQL.
			j := i + 1
			if strings.IndexByte("+-*/<>=~!@#%^&|`?", c) >= 0 {
				for j < n && strings.IndexByte("+-*/<>=~!@#%^&|`?", s[j]) >= 0 {
					if (s[j] == '-' && j+1 < n && s[j+1] == '-') || (s[j] == '/' && j+1 < n && s[j+1] == '*') {
						break
					}
					j++
				}
			}
			toks = append(toks, token{kind: tOp, text: s[i:j], pos: i})
			i = j
		}
	}
	return toks, nil
}

func scanNumber(s string, i int) int {
	n := len(s)
	if i+1 < n && s[i] == '0' && (s[i+1] == 'x' || s[i+1] == 'X' || s[i+1] == 'b' || s[i+1] == 'B' || s[i+1] == 'o' || s[i+1] == 'O') {
		j := i + 2
		for j < n && (isIdentChar(s[j]) && s[j] != '$') {
			j++
		}
		return j
	}
	j := i
	for j < n && (isDigit(s[j]) || s[j] == '_') {
		j++
	}
	if j < n && s[j] == '.' && !(j+1 < n && s[j+1] == '.') {
		j++
		for j < n && (isDigit(s[j]) || s[j] == '_') {
			j++
		}
	}
	if j < n && (s[j] == 'e' || s[j] == 'E') {
		k := j + 1
		if k < n && (s[k] == '+' || s[k] == '-') {
			k++
		}
		if k < n && isDigit(s[k]) {
			j = k
			for j < n && isDigit(s[j]) {
				j++
			}
		}
	}
	return j
}
