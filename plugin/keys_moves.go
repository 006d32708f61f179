package plugin

import (
	"strings"

	"gorm.io/gorm"
)

// An Update that assigns a key column moves its rows to another key: it
// must raise the key they move to as well as the keys its WHERE pins, or
// prove nothing. What it assigns is judged from the SQL it ran, not from
// what the caller gave: GORM drops the SET clause it built once the
// statement has run, and the caller's map or struct does not say what
// GORM made of it (Select("*") writes a zero key; a map's "items.id" is
// no field of the model but GORM sets `items`.`id`; clause.Set,
// clause.Assignments and gorm.Expr values add their own assignments).

// updateAssigns reports whether the UPDATE of table that stmt ran may
// assign col and, when the value is a known integer, its canonical form.
// The classifier's assignments when it reads the statement
// (classify.Pinned.Sets: every assigned column of the table, by its name
// under any qualifier, quoting or case the engine accepts), else whether
// col's name appears in the SET list at all (setListNames), the value
// then unknown. It is called for an UPDATE whose WHERE pins keys, so the
// SQL has a WHERE after its SET list; an empty SQL ran nothing (GORM had
// nothing to set).
func (p *Plugin) updateAssigns(stmt *gorm.Statement, table, col string) (v string, sets, known bool) {
	sql := stmt.SQL.String()
	if sql == "" {
		return "", false, false
	}
	c := p.classify(sql)
	if c.kind == kindWrite && c.pinned != nil && c.pinned.Sets != nil && len(c.writes) == 1 && c.writes[0] == table {
		if !p.rawAssigns(c.pinned, col) {
			return "", false, false
		}
		v, known = p.rawAssigned(c.pinned, col, keyInt, placeholderArgs(stmt.Vars))
		return v, true, known
	}
	return "", setListNames(sql, col), false
}

// setListNames reports whether col may be named in the SET list of an
// UPDATE's SQL: whether it appears as a word, in any case, between the
// first " SET " and the last " WHERE " (or the end), or the text has no
// " SET ". The span holds the whole SET list of an UPDATE with a WHERE
// whatever the rest of the text holds (a subquery only widens it), and a
// word that is not an assigned column (in an expression, a string, a
// condition) only makes the write prove nothing.
func setListNames(sql, col string) bool {
	u := strings.ToUpper(sql)
	i := strings.Index(u, " SET ")
	if i < 0 {
		return true
	}
	span := u[i+len(" SET "):]
	if j := strings.LastIndex(span, " WHERE "); j >= 0 {
		span = span[:j]
	}
	c := strings.ToUpper(col)
	for k := 0; k < len(span); {
		n := strings.Index(span[k:], c)
		if n < 0 {
			return false
		}
		start, end := k+n, k+n+len(c)
		if (start == 0 || !wordByte(span[start-1])) && (end == len(span) || !wordByte(span[end])) {
			return true
		}
		k = start + 1
	}
	return false
}

// wordByte reports whether b continues an unquoted SQL identifier (any
// byte of a multi-byte character counts).
func wordByte(b byte) bool {
	return b == '_' || b == '$' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || b >= 0x80
}
