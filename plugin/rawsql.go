package plugin

import (
	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/lsnstore"
)

type rawKind int

const (
	kindRead rawKind = iota
	kindBuffer
	kindWrite
)

// rawClass is what routing needs to know of a raw SQL text.
type rawClass struct {
	kind       rawKind
	reads      []string
	readsKnown bool
	// writes are the tables to publish; nil means unknown (the
	// database-wide position is raised). Empty and non-nil: nothing to
	// publish (a locking SELECT, COMMIT, ROLLBACK TO SAVEPOINT).
	writes []string
	locks  bool
	// pinned is what a single-table statement's WHERE pins (keys_raw.go).
	pinned *classify.Pinned
}

var noTables = []string{}

// fragmentWrite is a GORM read whose text written by hand calls a
// function that writes (tables.go): a write of unknown tables.
var fragmentWrite = rawClass{kind: kindWrite}

// classify analyses raw SQL with the PostgreSQL classifier (cached by text).
// Anything it cannot prove to be a read is not a read; a write whose tables
// it cannot name raises the database-wide position.
func (p *Plugin) classify(sql string) rawClass {
	r := p.classifier.Classify(sql)
	c := rawClass{locks: r.Locks, pinned: r.Pinned}
	switch r.Kind {
	case classify.Read:
		c.kind = kindRead
		// A user function declared read-only may read any table: the
		// database-wide position.
		c.reads, c.readsKnown = normalizeTables(r.Reads), !r.UnknownTables && !r.CallsUserFunctions
		if r.Catalog {
			c.reads = withSchema(c.reads) // the catalog: wait for the last schema change
		}
	case classify.Buffer:
		c.kind = kindBuffer
	default:
		c.kind = kindWrite
		switch {
		case r.UnknownTables:
			c.writes = nil
		case len(r.Writes) > 0:
			c.writes = normalizeTables(r.Writes)
			if r.DDL {
				c.writes = withSchema(c.writes) // catalog reads wait for it
			}
		case r.Reason == classify.ReasonTxnEnd, r.Locks:
			// Transaction control and locking reads change no table.
			c.writes = noTables
		default:
			c.writes = nil // a write of something unnamed (a sequence, a function): be conservative
		}
	}
	return c
}

// normalizeTables returns names normalized; the classifier's slice is
// shared through its cache, so it is copied only when a name changes.
func normalizeTables(names []string) []string {
	for i, n := range names {
		if lsnstore.TableKey(n) != n {
			out := make([]string, len(names))
			copy(out, names[:i])
			for j := i; j < len(names); j++ {
				out[j] = lsnstore.TableKey(names[j])
			}
			return out
		}
	}
	return names
}

// withSchema returns a copy of tables with the schema position added. The
// input may be the classifier's shared slice: it is never appended to.
func withSchema(tables []string) []string {
	out := make([]string, len(tables), len(tables)+1)
	copy(out, tables)
	return append(out, lsnstore.Schema)
}
