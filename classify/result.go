package classify

import (
	"slices"
	"strings"
)

// builder accumulates the classification of one SQL text.
type builder struct {
	kind    Kind
	reads   []string
	writes  []string
	locks   bool
	unknown bool
	ddl     bool // a schema change (Result.DDL)
	catalog bool // a catalog read (Result.Catalog)
	userFns bool // a call of a user function declared read-only (Result.CallsUserFunctions)
	reason  string
	temps   []string // temporary tables created earlier in the text
}

// schemaChange records a change of the persistent schema.
func (b *builder) schemaChange() {
	b.raise(Write)
	b.ddl = true
}

func (b *builder) raise(k Kind) {
	if k > b.kind {
		b.kind = k
	}
}

// guess records a Write that is a guess, with its reason; unknownTables
// reports that the tables written cannot be named.
func (b *builder) guess(reason string, unknownTables bool) {
	b.raise(Write)
	if b.reason == "" {
		b.reason = reason
	}
	if unknownTables {
		b.unknown = true
	}
}

func (b *builder) lock() {
	b.raise(Write)
	b.locks = true
}

func (b *builder) isTemp(name string) bool {
	return name != "" && slices.Contains(b.temps, name)
}

func (b *builder) addTemp(name string) {
	if name != "" && !b.isTemp(name) {
		b.temps = append(b.temps, name)
	}
}

func (b *builder) addRead(name string) {
	if name == "" || b.isTemp(name) {
		return
	}
	if isCatalogTable(name) {
		b.catalog = true
	}
	b.reads = append(b.reads, name)
}

// addWrite records a write to table name: Buffer when it is a temporary
// table created earlier in the text, Write otherwise.
func (b *builder) addWrite(name string) {
	if name == "" {
		b.guess("write to an unnamed table", true)
		return
	}
	if b.isTemp(name) {
		b.raise(Buffer)
		return
	}
	b.raise(Write)
	b.writes = append(b.writes, name)
}

type builderMark struct {
	kind                Kind
	nwrites, ntemps     int
	locks, unknown, ddl bool
	reason              string
}

func (b *builder) mark() builderMark {
	return builderMark{b.kind, len(b.writes), len(b.temps), b.locks, b.unknown, b.ddl, b.reason}
}

// restoreEffects drops every effect recorded since m except the tables read
// (used for plain EXPLAIN, which plans but does not execute).
func (b *builder) restoreEffects(m builderMark) {
	b.kind, b.writes, b.temps = m.kind, b.writes[:m.nwrites], b.temps[:m.ntemps]
	b.locks, b.unknown, b.ddl, b.reason = m.locks, m.unknown, m.ddl, m.reason
}

func (b *builder) result() Result {
	r := Result{Kind: b.kind, Locks: b.locks, UnknownTables: b.unknown, DDL: b.ddl, Catalog: b.catalog, CallsUserFunctions: b.userFns}
	if b.kind == Write {
		r.Reason = b.reason
	}
	r.Reads = sortDedup(b.reads)
	r.Writes = sortDedup(b.writes)
	return r
}

func sortDedup(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	if len(s) > 1 {
		slices.Sort(s)
		s = slices.Compact(s)
	}
	return slices.Clip(s)
}

// joinName builds a normalized table name from its parts: schema.table (a
// leading catalog/database part of a three-part name is dropped).
func joinName(parts []string) string {
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0]
	case 2:
		return parts[0] + "." + parts[1]
	default:
		return strings.Join(parts[len(parts)-2:], ".")
	}
}
