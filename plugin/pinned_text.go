package plugin

import "strings"

// The text of statements on a pinned connection, as pinnedStep reads it:
// each statement's leading words, outside strings, quoted names and
// comments.

// statementWords returns the first few words (upper case) of each
// statement of query, and every word of the statement when it is a SET.
func statementWords(query string) [][]string {
	var (
		out  [][]string
		cur  []string
		word strings.Builder
	)
	flushWord := func() {
		if word.Len() > 0 {
			if len(cur) < 8 || (len(cur) > 0 && cur[0] == "SET") {
				cur = append(cur, strings.ToUpper(word.String()))
			}
			word.Reset()
		}
	}
	flushStmt := func() {
		flushWord()
		if len(cur) > 0 {
			out = append(out, cur)
		}
		cur = nil
	}
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'' || c == '"' || c == '`':
			flushWord()
			for i++; i < len(query) && query[i] != c; i++ {
				if query[i] == '\\' && c != '`' {
					i++
				}
			}
			cur = append(cur, "''") // a value or a name, not a keyword
		case c == '-' && i+1 < len(query) && query[i+1] == '-', c == '#':
			flushWord()
			for i < len(query) && query[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(query) && query[i+1] == '*':
			flushWord()
			end := strings.Index(query[i+2:], "*/")
			if end < 0 {
				i = len(query)
			} else {
				i += end + 3
			}
		case c == ';':
			flushStmt()
		case identByte(c) || c == '@' || c == '.':
			word.WriteByte(c)
		case c == '=' || c == ':' || c == ',':
			flushWord()
			cur = append(cur, string(c))
		default:
			flushWord()
		}
	}
	flushStmt()
	return out
}

// txControlWord reports whether one of the statements (statementWords)
// begins or ends a transaction, or sets autocommit.
func txControlWord(ws [][]string) bool {
	for _, w := range ws {
		switch w[0] {
		case "BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "XA":
			return true
		case "SET":
			for _, x := range w {
				if isAutocommitName(x) {
					return true
				}
			}
		}
	}
	return false
}

// compoundBlock reports whether a text beginning with BEGIN is a block
// (BEGIN NOT ATOMIC ... END) rather than the start of a transaction.
func compoundBlock(ws [][]string) bool {
	return len(ws) == 1 && len(ws[0]) > 1 && ws[0][0] == "BEGIN" && ws[0][1] == "NOT"
}

func isAutocommitName(x string) bool {
	x = strings.TrimPrefix(x, "@@")
	x = strings.TrimPrefix(strings.TrimPrefix(x, "SESSION."), "LOCAL.")
	return x == "AUTOCOMMIT"
}

// setsAutocommit reports whether the statement w (its statementWords) is
// a SET of autocommit, and to what: known is false when the value is not a
// constant (a variable, an expression).
func setsAutocommit(w []string) (on, set, known bool) {
	if w[0] != "SET" {
		return false, false, false
	}
	for i, x := range w {
		if !isAutocommitName(x) {
			continue
		}
		j := i + 1
		for j < len(w) && (w[j] == ":" || w[j] == "=") {
			j++
		}
		if j >= len(w) || (j+1 < len(w) && w[j+1] != ",") {
			return false, true, false
		}
		switch w[j] {
		case "1", "ON", "TRUE":
			return true, true, true
		case "0", "OFF", "FALSE":
			return false, true, true
		}
		return false, true, false
	}
	return false, false, false
}

// leavesTxOpen reports whether the statement w (its statementWords) keeps MariaDB's or MySQL's
// open transaction open (the manual's list of statements that commit
// implicitly is long and grows; anything not listed here counts as one).
func leavesTxOpen(w []string) bool {
	second := ""
	if len(w) > 1 {
		second = w[1]
	}
	switch w[0] {
	case "SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE", "WITH", "VALUES", "TABLE",
		"SAVEPOINT", "RELEASE", "DO", "SHOW", "DESC", "DESCRIBE", "EXPLAIN", "HANDLER", "USE",
		"PREPARE", "DEALLOCATE", "ROLLBACK": // ROLLBACK TO SAVEPOINT (txEnd takes the others)
		return true
	case "SET":
		return second != "PASSWORD" && second != "ROLE" && second != "DEFAULT"
	case "LOAD":
		return second == "DATA" || second == "XML"
	}
	return false
}
