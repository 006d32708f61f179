package classify

import "strings"

// lexMySQL tokenizes MySQL/MariaDB SQL with the default sql_mode (backslash
// escapes in strings, "..." is a string). It handles # and "-- " comments,
// /* */ comments, executable comments /*! ... */, /*!50100 ... */ and
// MariaDB /*M! ... */ (their content is lexed as SQL), `quoted` identifiers,
// @user and @@system variables and ? placeholders. An unterminated comment,
// string or quoted identifier is an error.
func lexMySQL(s string, toks []token) ([]token, error) {
	i, n := 0, len(s)
	inExec := false // inside an executable comment
	for i < n {
		c := s[i]
		switch {
		case isSpace(c):
			i++
		case c == '#' || (c == '-' && i+1 < n && s[i+1] == '-' && (i+2 >= n || isSpace(s[i+2]) || s[i+2] < ' ')):
			for i < n && s[i] != '\n' && s[i] != '\r' {
				i++
			}
		case c == '*' && inExec && i+1 < n && s[i+1] == '/':
			inExec = false
			i += 2
		case c == '/' && i+1 < n && s[i+1] == '*':
			if i+2 < n && (s[i+2] == '!' || ((s[i+2] == 'M' || s[i+2] == 'm') && i+3 < n && s[i+3] == '!')) {
				if inExec {
					// Nested executable comments are not allowed.
					return toks, errUnterminated
				}
				j := i + 3
				if s[i+2] != '!' {
					j++
				}
				for j < n && isDigit(s[j]) {
					j++
				}
				if !strings.Contains(s[j:], "*/") {
					return toks, errUnterminated
				}
				inExec = true
				i = j
				continue
			}
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return toks, errUnterminated
			}
			i = i + 2 + end + 2
		case c == '\'' || c == '"':
			j, err := scanString(s, i+1, c, true)
			if err != nil {
				return toks, err
			}
			toks = append(toks, token{kind: tString, text: s[i:j], pos: i})
			i = j
		case c == '`':
			j, text, err := scanQuotedIdent(s, i+1, '`')
			if err != nil {
				return toks, err
			}
			toks = append(toks, token{kind: tQIdent, text: lowerASCII(text), pos: i})
			i = j
		case c == '@':
			kind := tVar
			j := i + 1
			if j < n && s[j] == '@' {
				kind = tSysVar
				j++
			}
			if j < n && (s[j] == '\'' || s[j] == '"' || s[j] == '`') {
				var k int
				var err error
				if s[j] == '`' {
					k, _, err = scanQuotedIdent(s, j+1, '`')
				} else {
					k, err = scanString(s, j+1, s[j], true)
				}
				if err != nil {
					return toks, err
				}
				toks = append(toks, token{kind: kind, text: lowerASCII(s[j:k]), pos: i})
				i = k
				continue
			}
			k := j
			for k < n && (isIdentChar(s[k]) || s[k] == '.') {
				k++
			}
			toks = append(toks, token{kind: kind, text: lowerASCII(s[j:k]), pos: i})
			i = k
		case c == '?':
			toks = append(toks, token{kind: tParam, text: "?", pos: i})
			i++
		case isDigit(c) || (c == '.' && i+1 < n && isDigit(s[i+1])):
			j := scanNumber(s, i)
			// MySQL identifiers may start with digits (1abc).
			if j < n && isIdentChar(s[j]) {
				for j < n && isIdentChar(s[j]) {
					j++
				}
				toks = append(toks, token{kind: tIdent, text: lowerASCII(s[i:j]), pos: i})
			} else {
				toks = append(toks, token{kind: tNumber, text: s[i:j], pos: i})
			}
			i = j
		case isIdentStart(c):
			j := i + 1
			for j < n && isIdentChar(s[j]) {
				j++
			}
			word := s[i:j]
			if j < n && s[j] == '\'' {
				lw := lowerASCII(word)
				if lw == "x" || lw == "b" || lw == "n" || lw[0] == '_' {
					k, err := scanString(s, j+1, '\'', true)
					if err != nil {
						return toks, err
					}
					toks = append(toks, token{kind: tString, text: s[i:k], pos: i})
					i = k
					continue
				}
			}
			toks = append(toks, token{kind: tIdent, text: lowerASCII(word), pos: i})
			i = j
		case c == '(' || c == ')' || c == '[' || c == ']' || c == ',' || c == ';' || c == '.':
			toks = append(toks, token{kind: tOp, text: s[i : i+1], pos: i})
			i++
		case c == ':' && i+1 < n && s[i+1] == '=':
			toks = append(toks, token{kind: tOp, text: ":=", pos: i})
			i += 2
		default:
			j := i + 1
			for j < n && strings.IndexByte("<>=!|&^~+-*/%", s[j]) >= 0 && strings.IndexByte("<>=!|&", c) >= 0 {
				j++
			}
			toks = append(toks, token{kind: tOp, text: s[i:j], pos: i})
			i = j
		}
	}
	if inExec {
		return toks, errUnterminated
	}
	return toks, nil
}
