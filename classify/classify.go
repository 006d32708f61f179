package classify

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
)

// Dialect selects the SQL grammar used to classify statements.
type Dialect int

const (
	// Postgres is PostgreSQL.
	Postgres Dialect = iota
	// MySQL is MySQL; it also covers MariaDB.
	MySQL
)

// String returns "postgres" or "mysql".
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// ParseDialect maps a name ("postgres", "postgresql", "pg", "mysql",
// "mariadb") to a Dialect.
func ParseDialect(name string) (Dialect, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "postgres", "postgresql", "pg", "pgx":
		return Postgres, nil
	case "mysql", "mariadb":
		return MySQL, nil
	}
	return 0, fmt.Errorf("classify: unknown dialect %q", name)
}

// Kind is the routing class of a statement. Kinds are ordered by severity:
// Read < Buffer < Write, so the kind of a multi-statement text is the
// maximum over its statements.
type Kind int

const (
	// Read statements have no side effect and may run on a replica.
	Read Kind = iota
	// Buffer statements only change session state (session variables,
	// temporary tables, prepared statements, transaction start, cursors).
	// They may run on a replica but must be replayed on the primary when the
	// session moves there.
	Buffer
	// Write statements have persistent or cross-session effects, or could
	// not be shown to be Read or Buffer.
	Write
)

// String returns "READ", "BUFFER" or "WRITE".
func (k Kind) String() string {
	switch k {
	case Read:
		return "READ"
	case Buffer:
		return "BUFFER"
	case Write:
		return "WRITE"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// ParseKind is the inverse of Kind.String.
func ParseKind(s string) (Kind, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "READ":
		return Read, nil
	case "BUFFER":
		return Buffer, nil
	case "WRITE":
		return Write, nil
	}
	return 0, fmt.Errorf("classify: unknown kind %q", s)
}

// Reasons reported in Result.Reason.
const (
	ReasonUnparseable = "unparseable"
	// ReasonTxnEnd marks COMMIT, ROLLBACK, END, ABORT and ROLLBACK TO
	// SAVEPOINT (see the transaction policy in the package documentation).
	ReasonTxnEnd = "transaction end"
)

// Result is the classification of one SQL text (one or more statements).
//
// Results may be shared between callers through the cache: treat them, and in
// particular the Reads and Writes slices, as read-only.
type Result struct {
	// Kind is the most severe kind over all statements of the text.
	Kind Kind
	// Reads lists the tables read: normalized, deduplicated and sorted.
	Reads []string
	// Writes lists the persistent tables written (temporary tables created
	// earlier in the same text are left out): normalized, deduplicated and
	// sorted.
	Writes []string
	// Locks reports row or table locking: FOR UPDATE/SHARE anywhere, LOCK
	// TABLE(S), advisory and user-level locks.
	Locks bool
	// UnknownTables reports that the tables written cannot all be
	// determined (dynamic SQL, unknown functions, procedures, DDL on
	// non-table objects, unparseable text); the caller should then use a
	// database-wide position.
	UnknownTables bool
	// DDL reports a change of the persistent schema (CREATE, ALTER, DROP,
	// RENAME, COMMENT, GRANT, REVOKE, SELECT INTO a new table; not
	// TRUNCATE, and not temporary objects): reads of the catalog must see
	// it. Writes then names the tables created, altered, renamed (old and
	// new names) or dropped, or UnknownTables is set.
	DDL bool
	// Catalog reports a read of the system catalog, whose answer a schema
	// change alters: a relation of information_schema, pg_catalog (or an
	// unqualified pg_* relation), mysql, performance_schema or sys; a
	// catalog function (to_regclass, pg_get_*, has_*_privilege,
	// format_type, ...); a cast to an object identifier type
	// ('t'::regclass); MySQL's SHOW. current_schema() and DATABASE() do not
	// count. It is reported whatever Kind is.
	Catalog bool
	// CallsUserFunctions reports a call of a user function declared
	// read-only (Config.ReadOnlyFunctions, AddReadOnlyFunctions). Such a
	// function writes nothing, but its body may read any table, which
	// Reads does not name: a caller that needs every table a statement
	// reads (a read that must see fresh data) should take them as
	// unknown, or follow the function itself. It is reported whatever
	// Kind is.
	CallsUserFunctions bool
	// Pinned, for a text of one single-table SELECT, UPDATE or DELETE
	// whose WHERE pins columns to values, or one INSERT ... VALUES (see
	// Pinned), says which; nil otherwise. Shared like the slices.
	Pinned *Pinned
	// Reason explains a Write that is a guess ("unknown function f",
	// "unparseable", ...) or a policy decision ("transaction end"). It is
	// empty otherwise.
	Reason string
}

// Config configures a Classifier.
type Config struct {
	// Dialect selects the grammar.
	Dialect Dialect
	// ReadOnlyFunctions lists user functions known to be read-only. Names
	// are matched case-insensitively, either bare ("f") or schema-qualified
	// ("public.f"); a bare name matches the function in any schema.
	ReadOnlyFunctions []string
	// CacheSize is the number of results kept in the LRU cache keyed by SQL
	// text. Zero means 4096; a negative value disables the cache.
	CacheSize int
}

// DefaultCacheSize is the cache size used when Config.CacheSize is zero.
const DefaultCacheSize = 4096

// Classifier classifies SQL statements. It is safe for concurrent use.
type Classifier struct {
	dialect  Dialect
	readOnly atomic.Pointer[map[string]struct{}]
	mu       sync.Mutex // serializes AddReadOnlyFunctions
	cache    *lruCache
}

// New returns a Classifier for cfg.
func New(cfg Config) *Classifier {
	c := &Classifier{dialect: cfg.Dialect}
	m := make(map[string]struct{}, len(cfg.ReadOnlyFunctions))
	for _, f := range cfg.ReadOnlyFunctions {
		if f = normFuncName(f); f != "" {
			m[f] = struct{}{}
		}
	}
	c.readOnly.Store(&m)
	size := cfg.CacheSize
	if size == 0 {
		size = DefaultCacheSize
	}
	if size > 0 {
		c.cache = newLRUCache(size)
	}
	return c
}

// Dialect returns the dialect the classifier was built for.
func (c *Classifier) Dialect() Dialect { return c.dialect }

// AddReadOnlyFunctions marks user functions as read-only, for example after
// learning their volatility from pg_proc. Cached results are discarded.
// Built-in functions with known side effects (nextval, pg_advisory_lock,
// GET_LOCK, ...) stay Write or Buffer whatever this list says.
func (c *Classifier) AddReadOnlyFunctions(names ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.readOnly.Load()
	m := make(map[string]struct{}, len(old)+len(names))
	for k := range old {
		m[k] = struct{}{}
	}
	for _, f := range names {
		if f = normFuncName(f); f != "" {
			m[f] = struct{}{}
		}
	}
	c.readOnly.Store(&m)
	if c.cache != nil {
		c.cache.purge()
	}
}

func normFuncName(f string) string {
	return strings.ToLower(strings.TrimSpace(f))
}

// isReadOnlyUserFunc reports whether the (lower-case, possibly qualified)
// function name was declared read-only.
func (c *Classifier) isReadOnlyUserFunc(name string) bool {
	m := *c.readOnly.Load()
	if len(m) == 0 {
		return false
	}
	if _, ok := m[name]; ok {
		return true
	}
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		_, ok := m[name[i+1:]]
		return ok
	}
	return false
}

// Classify classifies sql, which may hold several statements separated by
// semicolons. It is safe for concurrent use, caches its results (see Result
// for the sharing rules) and never panics: on an internal error it returns
// Write with Reason "unparseable".
func (c *Classifier) Classify(sql string) Result {
	if c.cache == nil {
		return c.classifyUncached(sql)
	}
	if r, ok := c.cache.get(sql); ok {
		return r
	}
	gen := c.cache.generation()
	r := c.classifyUncached(sql)
	c.cache.add(sql, r, gen)
	return r
}

func (c *Classifier) classifyUncached(sql string) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			res = unparseable()
		}
	}()
	switch c.dialect {
	case MySQL:
		res = c.classifyMySQL(sql)
	default:
		res = c.classifyPostgres(sql)
	}
	if res.Kind != Buffer && !res.UnknownTables && !res.Locks && res.Reason == "" {
		res.Pinned = c.pinnedOf(sql, res.Kind)
		tables := res.Reads
		if res.Kind == Write {
			tables = res.Writes
		}
		if res.Pinned != nil && (len(tables) != 1 || tables[0] != res.Pinned.Table) {
			res.Pinned = nil // the parsers disagree on the table: say nothing
		}
	}
	return res
}

// pinnedOf is Result.Pinned of sql.
func (c *Classifier) pinnedOf(sql string, kind Kind) *Pinned {
	var buf [64]token
	var toks []token
	var err error
	if c.dialect == MySQL {
		toks, err = lexMySQL(sql, buf[:0])
	} else {
		toks, err = lexPostgres(sql, buf[:0])
	}
	if err != nil {
		return nil
	}
	sts := splitStatements(toks)
	if len(sts) != 1 {
		return nil
	}
	switch leadingKeyword(sts[0]) {
	case "select":
		if kind != Read || !sts[0][0].is("select") {
			return nil
		}
	case "update", "delete", "insert":
		if kind != Write {
			return nil
		}
	default:
		return nil
	}
	return pinned(c.dialect, sts[0])
}

func unparseable() Result {
	return Result{Kind: Write, UnknownTables: true, Reason: ReasonUnparseable}
}
