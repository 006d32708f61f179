package plugin

import (
	"strings"

	"github.com/freshread/freshread/classify"
)

// fragmentPlace is where SQL text written by hand sits in a GORM-built
// statement; the classifier sees it in a statement that parses there.
type fragmentPlace uint8

const (
	atCondition fragmentPlace = iota // Where, Having, an expression used as a value
	atSelect                         // Select: a column list
	atOrder                          // Order
	atGroup                          // Group
	atJoin                           // Joins text: "JOIN t ON ..."
	atFrom                           // db.Table text, a clause.From's raw table
	atSubquery                       // a raw subquery: a whole statement
)

// wrap returns sql (placeholders already replaced) in a statement of
// dialect d that parses with sql in its place.
func (at fragmentPlace) wrap(d classify.Dialect, sql string) string {
	switch at {
	case atSelect:
		return "SELECT " + sql
	case atOrder:
		return "SELECT 1 ORDER BY " + sql
	case atGroup:
		return "SELECT 1 GROUP BY " + sql
	case atJoin:
		return "SELECT 1 FROM freshread_joined " + sql
	case atFrom:
		return "SELECT 1 FROM " + sql
	case atSubquery:
		return sql
	}
	if d == classify.MySQL {
		return "SELECT 1 FROM DUAL WHERE (" + sql + ")"
	}
	return "SELECT 1 WHERE (" + sql + ")"
}

// fragmentScan is what scanFragment finds in SQL text written by hand.
type fragmentScan uint8

const (
	// scanSubquery: the word SELECT, TABLE (PostgreSQL's TABLE t) or
	// LATERAL: the text may read tables of its own.
	scanSubquery fragmentScan = 1 << iota
	// scanCall: a name followed by "(" that is neither a keyword nor an
	// immutable built-in (cheapCall), or is qualified or quoted: a
	// function that may read other rows, or write.
	scanCall
)

// scanFragment is the cheap scan of SQL text a GORM read holds (a
// condition, selected columns, an ordering): it reports what makes the
// text worth classifying. String literals and quoted identifiers are
// skipped; where the scan cannot be sure of their bounds (a comment, a
// backslash in a literal, a dollar quote, an unterminated quote) it scans
// the text again blind to quotes, which can only find more.
func scanFragment(sql string, d classify.Dialect) fragmentScan {
	f, sure := scanText(sql, d, false)
	if !sure {
		f, _ = scanText(sql, d, true)
	}
	return f
}

// scanText scans sql; blind: quotes are ordinary characters (and a quoted
// name's quotes invisible). sure=false: the scan could not follow the
// quoting.
func scanText(sql string, d classify.Dialect, blind bool) (f fragmentScan, sure bool) {
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case !blind && (c == '\'' || c == '"' || c == '`'):
			j := strings.IndexByte(sql[i+1:], c)
			if j < 0 {
				return f, false
			}
			end := i + 1 + j + 1
			if strings.IndexByte(sql[i+1:end-1], '\\') >= 0 {
				return f, false // an escape, or not: the dialect's settings say
			}
			if c != '\'' && nextByte(sql, end, false) == '(' {
				f |= scanCall // "f"(1): a quoted function name
			}
			i = end
		case !blind && (c == '#' || c == '$' || c == '\\' ||
			(c == '-' || c == '/') && i+1 < len(sql) && (sql[i+1] == '-' || sql[i+1] == '*')):
			// A comment, a dollar quote or a parameter: not followed.
			// (-/ and /- are operators; they make the blind scan run too.)
			return f, false
		case c >= '0' && c <= '9':
			for i++; i < len(sql) && (identByte(sql[i]) || sql[i] == '.'); i++ {
			}
		case identByte(c) && c != '$':
			j := i + 1
			for j < len(sql) && identByte(sql[j]) {
				j++
			}
			word := sql[i:j]
			switch {
			case strings.EqualFold(word, "select"), strings.EqualFold(word, "table"), strings.EqualFold(word, "lateral"):
				f |= scanSubquery
			case nextByte(sql, j, blind) == '(' && (qualified(sql, i, blind) || !cheapCall(word, d)):
				f |= scanCall
			}
			i = j
		default:
			i++
		}
	}
	return f, true
}

// nextByte is the first byte of sql from i on that is not a space (blind:
// nor a quote), 0 at the end.
func nextByte(sql string, i int, blind bool) byte {
	for i < len(sql) && skipped(sql[i], blind) {
		i++
	}
	if i == len(sql) {
		return 0
	}
	return sql[i]
}

// qualified reports whether the name starting at i follows a "." (spaces
// and, blind, quotes between): schema.f(...).
func qualified(sql string, i int, blind bool) bool {
	i--
	for i >= 0 && skipped(sql[i], blind) {
		i--
	}
	return i >= 0 && sql[i] == '.'
}

// skipped reports whether c is looked past for the byte next to a name: a
// space, or blind, a quote.
func skipped(c byte, blind bool) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\f', '\v':
		return true
	case '"', '`', '\'':
		return blind
	}
	return false
}

// cheapCall reports whether name followed by "(" is a keyword or type name
// (IN (...), CAST(... AS numeric(10, 2))) or a built-in function of
// dialect d that writes nothing and reads no row: an aggregate, an
// immutable scalar function, the server's port or the current database. GORM's own (count(*) of Count) and these
// cost no classification, and keep a read keyed. A user function cannot
// take these names unqualified: PostgreSQL finds pg_catalog's first, and
// MySQL and MariaDB call a built-in when the name is one.
func cheapCall(name string, d classify.Dialect) bool {
	var buf [24]byte
	if len(name) > len(buf) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	lower := buf[:len(name)]
	if _, ok := cheapCalls[string(lower)]; ok { // (no allocation: a map index)
		return true
	}
	if d == classify.MySQL {
		_, ok := cheapCallsMySQL[string(lower)]
		return ok
	}
	_, ok := cheapCallsPostgres[string(lower)]
	return ok
}

func wordSet(words string) map[string]struct{} {
	m := map[string]struct{}{}
	for _, w := range strings.Fields(words) {
		m[w] = struct{}{}
	}
	return m
}

var (
	// cheapCalls are keywords, type names and built-ins of both dialects.
	cheapCalls = wordSet(`
		in any all some exists values row array cast interval and or not is on as when then else case
		like ilike between over filter within group by from where using distinct escape
		numeric decimal dec varchar char character nchar float double real int integer bigint smallint
		time timestamp bit binary varbinary
		count sum min max avg
		lower upper coalesce nullif abs length char_length character_length octet_length bit_length
		trim ltrim rtrim concat concat_ws greatest least round floor ceil ceiling mod sign sqrt
		power pow exp ln log log10 substring substr replace position left right lpad rpad reverse repeat
		ascii md5 now extract`)
	cheapCallsPostgres = wordSet(`
		btrim strpos trunc date_trunc date_part to_char age array_agg string_agg bool_and bool_or
		array_length cardinality split_part initcap
		inet_server_port inet_server_addr inet_client_port inet_client_addr pg_backend_pid
		current_database current_schema pg_is_in_recovery`)
	cheapCallsMySQL = wordSet(`
		ifnull if isnull truncate date year month day hour minute second date_format datediff
		date_add date_sub group_concat field instr locate
		database schema connection_id`)
)
