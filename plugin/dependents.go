package plugin

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/depgraph"
	"github.com/freshread/freshread/lsnstore"
)

// depGraph is the dependency graph in use: table -> the tables a write to
// it also writes (closed transitively), from Config.Dependents merged with
// the graph the tracker publishes in the store and, on MariaDB and MySQL,
// the graph the plugin learns from information_schema (depgraph.AnalyzeMySQL).
// lsnstore.Everything ("*") among the dependents means "any table": the
// unknown-tables position is raised too.
type depGraph struct {
	graph   map[string][]string
	version string // the store graph's version merged in
	// unknown: the dependencies could not be learned, so a write to any
	// table may write any other (every write raises the unknown-tables
	// position).
	unknown bool
	// gen is the store's schema generation read just before the catalog
	// the graph was learned from; checked says there is one (the plugin
	// learned the graph itself), and raises send it to the store's schema
	// check (schema_changes.go).
	gen     string
	checked bool
}

// depSources are the graphs merged into depGraph (guarded by
// Plugin.depMu).
type depSources struct {
	published   map[string][]string // the tracker's, from the store
	version     string
	learned     map[string][]string // from the database's catalog
	keyMoves    map[string][]string // columns that change unnamed (depgraph.Graph.KeyMoves)
	selfReasons map[string][]string // why a table is self-dependent (depgraph.Graph.SelfReasons)
	selfLogged  map[string]bool     // the self-dependent tables already logged
	learnFailed bool
	// failures counts the learnings that failed in a row: the next one
	// is tried after learnRetry(failures), not after a whole
	// dependentsLearnInterval.
	failures  int
	learnedAt time.Time
	// learnedGen is the store's schema generation read just before the
	// catalog that learned was read (unreadGeneration when it could not
	// be read); learnedOK says learned was learned.
	learnedGen string
	learnedOK  bool
	// started counts the learnings begun and installed is the number of
	// the last one whose result was installed: a learning that began
	// before it (a slow catalog read) installs nothing, so a graph never
	// gives way to an older one.
	started, installed uint64
	// learn reads the database's own graph: pgDependents or
	// depgraph.AnalyzeMySQL; nil when the plugin cannot (PostgreSQL through
	// another driver than pgx).
	learn func(ctx context.Context, db *sql.DB) (*depgraph.Graph, error)
}

// dependentsRefresh is how often the poller checks the store graph's
// version.
const dependentsRefresh = time.Second

// learnRetry is how long after the n-th failed learning in a row the
// next is tried: 1 s, doubling, at most dependentsLearnInterval. A
// catalog read that failed once (a server's hiccup) then costs a second
// of reads that wait for every write, not half a minute.
func learnRetry(n int) time.Duration {
	d := time.Second
	for i := 1; i < n && d < dependentsLearnInterval; i++ {
		d *= 2
	}
	return min(d, dependentsLearnInterval)
}

// learnTimeout bounds one learning of the database's graph by the
// poller (a large catalog takes a while; the poller does not wait for it).
const learnTimeout = 30 * time.Second

// refreshDependents rereads the store's graph when its version changed. A
// store without a graph (or an error) keeps the current one. It relearns
// the database's own graph and the tables' primary keys (learnNow) every
// dependentsLearnInterval: at once when
// inBackground is false (Initialize), else in a goroutine of its own, so
// that the poller is not held up by a large catalog.
func (p *Plugin) refreshDependents(ctx context.Context, now time.Time, inBackground bool) {
	p.depMu.Lock()
	if ds, ok := p.cfg.Store.(lsnstore.DependentsStore); ok {
		if v, err := ds.DependentsVersion(ctx); err == nil && v != p.depSrc.version {
			if d, err := ds.Dependents(ctx); err == nil {
				p.depSrc.published, p.depSrc.version = d.Graph, d.Version
				p.installDependents()
			}
		}
	}
	due := (p.depSrc.learn != nil || p.cfg.keyed()) && now.Sub(p.depSrc.learnedAt) >= dependentsLearnInterval
	// A raise found that the graph may predate a schema change
	// (schema_changes.go): relearn now, one relearning at a time.
	stale := !due && inBackground && p.depSrc.learn != nil && p.staleDue(now) && p.relearning.CompareAndSwap(false, true)
	if stale {
		p.staleAt.Store(now.UnixNano())
		due = true
	}
	if due {
		p.depSrc.learnedAt = now // also: a background learning has started
	}
	p.depMu.Unlock()
	switch {
	case !due:
	case !inBackground:
		p.learnNow(ctx)
	default:
		p.wg.Add(1) // the poller runs, so Close is not past its Wait yet
		go func() {
			defer p.wg.Done()
			if stale {
				defer p.relearning.Store(false)
			}
			ctx, cancel := context.WithTimeout(context.Background(), learnTimeout)
			defer cancel()
			go func() {
				select {
				case <-p.stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			p.learnNow(ctx)
		}()
	}
}

// relearnAfterDDL: a schema change run through the plugin may add a
// trigger, rule, foreign key or view, or rename a table. The plugin
// relearns the graph before the statement returns, so a write through a
// trigger the application has just created is never read stale. Other
// processes learn of it from the store's schema check
// (schema_changes.go): their next raise covers every table and makes them
// relearn.
// Dropping needs no relearning: a stale edge only raises one table more.
// Any other schema change (a table created, a primary key added or
// dropped) relearns the tables' primary keys (keys_catalog.go), so that
// raw SQL keys a table created through the plugin from its first
// statement.
func (p *Plugin) relearnAfterDDL(db *gorm.DB) {
	sql := db.Statement.SQL.String()
	switch {
	case addsDependency(sql):
		p.learnNow(db.Statement.Context)
	case schemaVerb(sql) != "":
		p.learnKeys(db.Statement.Context)
	}
}

// dependencyWords are the words of a CREATE or ALTER that can add a
// dependency between tables. A generated column is "GENERATED ALWAYS AS",
// or on MariaDB and MySQL "AS (...)" followed by PERSISTENT, STORED or
// VIRTUAL.
var dependencyWords = []string{"trigger", "view", "rule", "function", "procedure", "references", "foreign", "rename",
	"partition", "inherit", "generated", "persistent", "stored", "virtual", "on update"}

// addsDependency reports whether sql is a schema change that can add a
// dependency or rename a table: RENAME, or CREATE or ALTER naming one of
// dependencyWords.
func addsDependency(sql string) bool {
	switch schemaVerb(sql) {
	case "rename":
		return true
	case "create", "alter":
		lower := strings.ToLower(sql)
		for _, w := range dependencyWords {
			if strings.Contains(lower, w) {
				return true
			}
		}
	}
	return false
}

// schemaVerb returns the first word of sql in lower case when it is
// CREATE, ALTER, DROP or RENAME (after spaces and comments), else "".
func schemaVerb(sql string) string {
	for {
		sql = strings.TrimLeft(sql, " \t\r\n;(")
		switch {
		case strings.HasPrefix(sql, "--"), strings.HasPrefix(sql, "#"):
			i := strings.IndexByte(sql, '\n')
			if i < 0 {
				return ""
			}
			sql = sql[i+1:]
			continue
		case strings.HasPrefix(sql, "/*"):
			i := strings.Index(sql, "*/")
			if i < 0 {
				return ""
			}
			sql = sql[i+2:]
			continue
		}
		break
	}
	end := 0
	for end < len(sql) && end < 8 && (sql[end]|0x20 >= 'a' && sql[end]|0x20 <= 'z') {
		end++
	}
	switch w := strings.ToLower(sql[:end]); w {
	case "create", "alter", "drop", "rename":
		return w
	}
	return ""
}

// learnNow reads the tables' primary keys (learnKeys) and the database's
// triggers, foreign keys and views without holding depMu (a large catalog
// takes a while), then records and installs the graph under it. When it
// cannot read them, every write is taken to write any table until it can.
func (p *Plugin) learnNow(ctx context.Context) {
	p.learnKeys(ctx)
	p.depMu.Lock()
	learn := p.depSrc.learn
	p.depMu.Unlock()
	if learn == nil {
		return
	}
	// The store's schema generation first: a schema change advances it
	// once it is visible, so a change that advanced it before this read
	// is in the catalog read next (schema_changes.go). A raise that found
	// the graph stale before this point is answered by this learning.
	p.depMu.Lock()
	p.depSrc.started++
	seq := p.depSrc.started
	p.depMu.Unlock()
	p.schemaStale.Store(false)
	gen := p.schemaGeneration(ctx)
	g, err := learn(ctx, p.primaryDB)
	p.depMu.Lock()
	defer p.depMu.Unlock()
	if seq < p.depSrc.installed {
		return // a learning begun later has installed what it read
	}
	p.depSrc.installed = seq
	switch {
	case errors.Is(err, errNotPgx):
		p.cfg.Logger.WarnContext(ctx, "freshread: dependencies between tables (triggers, cascades, views) are not learned: run the tracker or set Config.Dependents", "err", err)
		p.depSrc.learn = nil
		return
	case err != nil && p.isStopped():
		return // Close cancelled it
	case err != nil:
		// Learned again soon: until then every write raises every table.
		p.depSrc.failures++
		p.depSrc.learnedAt = time.Now().Add(learnRetry(p.depSrc.failures) - dependentsLearnInterval)
		if !p.depSrc.learnFailed {
			p.cfg.Logger.WarnContext(ctx, "freshread: cannot read the database's triggers, foreign keys and views; every write now delays reads of every table until they can be read: let the primary's role read the catalog (err says what failed), or run the tracker, or set Config.Dependents", "err", err)
		}
		p.depSrc.learnFailed = true
	default:
		p.depSrc.learned, p.depSrc.keyMoves, p.depSrc.selfReasons, p.depSrc.learnFailed = g.Edges, g.KeyMoves, g.SelfReasons, false
		p.depSrc.failures = 0
		p.depSrc.learnedGen, p.depSrc.learnedOK = gen, true
	}
	p.installDependents()
}

// installDependents merges Config.Dependents, the store's graph and the
// learned graph and installs the result.
func (p *Plugin) installDependents() {
	union := make(map[string][]string, len(p.cfg.Dependents)+len(p.depSrc.published)+len(p.depSrc.learned))
	for _, src := range []map[string][]string{p.cfg.Dependents, p.depSrc.published, p.depSrc.learned} {
		for t, ds := range src {
			union[t] = append(union[t], ds...)
		}
	}
	// A column the plugin keys a table by (its models' primary key, the
	// catalog's, Config.KeyColumns) that changes without a statement
	// naming it makes the table's writes unkeyed: an edge to itself
	// (depgraph checks only the catalog's keys and unique indexes).
	self := maps.Clone(p.depSrc.selfReasons)
	for k, moved := range p.depSrc.keyMoves {
		if slices.Contains(union[k], k) {
			continue // self-dependent already
		}
		for _, kc := range p.keyedColumns(k) {
			if movable(moved, kc.col) {
				union[k] = append(union[k], k)
				if self == nil {
					self = map[string][]string{}
				}
				self[k] = append(self[k], kc.source+" names "+kc.col+", which changes without a statement naming it")
				break
			}
		}
	}
	p.logSelfDependent(self)
	p.deps.Store(&depGraph{graph: closeDependents(union), version: p.depSrc.version, unknown: p.depSrc.learnFailed,
		gen: p.depSrc.learnedGen, checked: p.depSrc.learnedOK})
}

// keyedColumn is a column the plugin keys a table by, and where that key
// comes from.
type keyedColumn struct{ col, source string }

// keyedColumns lists every column this process keys table by, whatever
// names it: the integer primary key its models declare (learned as
// statements use them, even when the catalog holds no key on it), the
// catalog's primary key and Config.KeyColumns.
func (p *Plugin) keyedColumns(table string) []keyedColumn {
	var cols []keyedColumn
	if v, ok := p.keyNames.Load(table); ok {
		if k := v.(*tableKeyNames).pk.Load(); k != nil {
			for _, c := range k.cols {
				cols = append(cols, keyedColumn{c, "the model's primary key"})
			}
		}
	}
	if k, ok := p.catalogKey(table); ok {
		for _, c := range k.cols {
			cols = append(cols, keyedColumn{c, "the catalog's primary key"})
		}
	}
	for _, c := range p.cfg.KeyColumns[table] {
		cols = append(cols, keyedColumn{c, "Config.KeyColumns"})
	}
	return cols
}

// movable reports whether col is among moved, the columns of a table a
// write may change without naming them ("*": any).
func movable(moved []string, col string) bool {
	return slices.Contains(moved, "*") || slices.Contains(moved, strings.ToLower(col))
}

// keyColumnLearned: table's models key it by col, which this process did
// not key it by before. When col can change without a statement naming it,
// the graph is installed again before the statement that showed the model
// runs, so that its write, and every later one, is unkeyed.
func (p *Plugin) keyColumnLearned(table, col string) {
	p.depMu.Lock()
	defer p.depMu.Unlock()
	if movable(p.depSrc.keyMoves[table], col) && !slices.Contains(p.dependentsOf(table), table) {
		p.installDependents()
	}
}

// logSelfDependent says once per table, at Info, that a table's writes
// are unkeyed because they change rows of it they do not name, and why:
// the answer to "why do reads of this table by key go to the primary after
// every write to it" (caller holds depMu).
func (p *Plugin) logSelfDependent(self map[string][]string) {
	for t, why := range self {
		if p.depSrc.selfLogged[t] || !p.cfg.keyed() {
			continue
		}
		if p.depSrc.selfLogged == nil {
			p.depSrc.selfLogged = map[string]bool{}
		}
		p.depSrc.selfLogged[t] = true
		p.cfg.Logger.Info("freshread: writes to this table may change rows of it that they do not name, so each of them delays reads of the table by key too", "table", t, "because", strings.Join(why, "; "))
	}
}

// dependentsOf returns the graph's dependents of t.
func (p *Plugin) dependentsOf(t string) []string {
	if g := p.deps.Load(); g != nil {
		return g.graph[t]
	}
	return nil
}

// dependentsUnknown reports whether any write may write any table.
func (p *Plugin) dependentsUnknown() bool {
	g := p.deps.Load()
	return g != nil && g.unknown
}
