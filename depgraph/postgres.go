package depgraph

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/lsnstore"
)

// Querier is what the analysis needs of a connection: *pgx.Conn and
// *pgxpool.Pool implement it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Graph is the dependency graph of one database: Edges maps a table to
// the tables a write to it also writes, directly (one trigger, one
// cascading foreign key, one rule, one view, one partition or inheritance
// link). Closed() gives the transitive closure, which is what is
// published. Reasons explains every edge to lsnstore.Everything.
//
// A table that lists itself writes rows of itself that a statement does
// not name (self-dependencies: see selfdeps.go); SelfReasons says why.
type Graph struct {
	// Edges maps a table to the tables a write to it also writes,
	// directly.
	Edges map[string][]string
	// Reasons maps a table with an edge to lsnstore.Everything to why.
	Reasons map[string][]string
	// SelfReasons maps a self-dependent table to why.
	SelfReasons map[string][]string
	// KeyMoves lists, per table, the columns whose value a write may change
	// without naming them ("*": any column): those a BEFORE row trigger
	// assigns, and stored generated columns. A table with such a column in
	// its primary key or a unique index is self-dependent already; a
	// process keying a table by other columns checks them against it.
	KeyMoves map[string][]string

	b *edgeBuilder
}

func (g *Graph) builder() *edgeBuilder {
	if g.b == nil {
		g.b = newEdgeBuilder()
	}
	return g.b
}

// addEverything adds the edge from -> lsnstore.Everything with a reason.
func (g *Graph) addEverything(from, reason string) {
	g.builder().alias(from, lsnstore.Everything)
	if g.Reasons == nil {
		g.Reasons = map[string][]string{}
	}
	g.Reasons[from] = appendNew(g.Reasons[from], reason)
}

// effect adds the edge from -> to of a trigger, rule or cascade (why says
// which, for a self edge).
func (g *Graph) effect(from, to, why string) { g.builder().effect(from, to, why) }

// alias adds the edge from -> to of a view, partition or inheritance link.
func (g *Graph) alias(from, to string) { g.builder().alias(from, to) }

// finish marks the self-dependent tables (cycles through an effect, keys
// that move) and sets Edges and SelfReasons.
func (g *Graph) finish(m *moves, keys map[string][]string) {
	b := g.builder()
	b.keyMoves(m, keys)
	b.cycles()
	g.Edges, g.SelfReasons, g.KeyMoves = b.edges, b.reasons, m.cols
}

// EdgeCount is the number of direct edges.
func (g *Graph) EdgeCount() int {
	n := 0
	for _, l := range g.Edges {
		n += len(l)
	}
	return n
}

// Closed returns the transitive closure: every table reachable from each
// table, sorted. A table that reaches lsnstore.Everything has it in its
// list.
func (g *Graph) Closed() map[string][]string { return lsnstore.CloseGraph(g.Edges) }

// userFunc is a function outside pg_catalog and information_schema.
type userFunc struct {
	oid      uint32
	schema   string
	name     string
	lang     string
	body     string
	analyzed bool
	// direct effects
	writes  []string
	dynamic []string // reasons it may write anything
	calls   []uint32
}

func (f *userFunc) String() string { return f.schema + "." + f.name }

// analyzer holds one database's catalog while a graph is built.
type analyzer struct {
	version    int // server_version_num
	funcs      map[uint32]*userFunc
	byName     map[string][]uint32 // "name" and "schema.name" -> oids
	classifier *classify.Classifier
}

// AnalyzePostgres reads the catalog of the database q is connected to
// and returns its dependency graph:
//
//   - triggers (pg_trigger, not internal): the table of the trigger ->
//     every table its function writes, following the functions it calls
//     (PERFORM, SELECT f(), CALL, expressions); dynamic SQL (EXECUTE),
//     functions in other languages than plpgsql and sql, and statements
//     not understood give lsnstore.Everything;
//   - foreign keys with ON DELETE/UPDATE CASCADE, SET NULL or SET DEFAULT:
//     parent -> child;
//   - rules (pg_rewrite, other than a view's SELECT rule): the table ->
//     the tables its actions write, Everything when not understood;
//   - views: each table or view a view reads -> the view (a write to the
//     table changes what the view returns); an automatically updatable
//     view -> its base table (a write through the view writes it);
//   - partitions and inheritance (pg_inherits): parent -> child and child
//     -> parent, at every level (a write through either name changes what
//     the other returns);
//   - foreign tables (pg_foreign_table): the table -> Everything (a write
//     through it may write a table of this database through a loopback
//     server, which the catalog does not say);
//   - self-dependencies (selfdeps.go): a table whose writes may change
//     other rows of it (a trigger or rule writing its own table, a
//     self-referencing cascading foreign key, a cycle of triggers) or move
//     a row to a key the statement does not name (a BEFORE row trigger
//     assigning a column of its primary key or a unique index, a stored
//     generated column in one) has an edge to itself.
//
// Table names are normalised as the plugin does (schema dropped, lower
// case).
func AnalyzePostgres(ctx context.Context, q Querier) (*Graph, error) {
	a := &analyzer{funcs: map[uint32]*userFunc{}, byName: map[string][]uint32{}}
	if err := a.loadFunctions(ctx, q); err != nil {
		return nil, err
	}
	g := &Graph{}
	m := newMoves()
	if err := a.triggers(ctx, q, g, m); err != nil {
		return nil, err
	}
	if err := foreignKeys(ctx, q, g); err != nil {
		return nil, err
	}
	if err := a.rules(ctx, q, g); err != nil {
		return nil, err
	}
	if err := views(ctx, q, g); err != nil {
		return nil, err
	}
	if err := inheritance(ctx, q, g); err != nil {
		return nil, err
	}
	if err := foreignTables(ctx, q, g); err != nil {
		return nil, err
	}
	if err := a.generatedColumns(ctx, q, m); err != nil {
		return nil, err
	}
	keys, err := keyColumns(ctx, q)
	if err != nil {
		return nil, err
	}
	g.finish(m, keys)
	return g, nil
}

const functionsQuery = `
SELECT p.oid::int8, n.nspname, p.proname, l.lanname,
       CASE WHEN current_setting('server_version_num')::int >= 140000 AND p.prosqlbody IS NOT NULL
            THEN pg_get_function_sqlbody(p.oid) ELSE p.prosrc END
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_language l ON l.oid = p.prolang
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%'`

const functionsQuery13 = `
SELECT p.oid::int8, n.nspname, p.proname, l.lanname, p.prosrc
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_language l ON l.oid = p.prolang
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%'`

// catalogReadOnly are pg_catalog functions left out of the read-only list
// given to the classifier: they run a query given as text.
var catalogReadOnly = map[string]bool{
	"query_to_xml": false, "query_to_xmlschema": false, "query_to_xml_and_xmlschema": false,
	"cursor_to_xml": false, "cursor_to_xmlschema": false,
}

func (a *analyzer) loadFunctions(ctx context.Context, q Querier) error {
	var version int
	rows, err := q.Query(ctx, "SELECT current_setting('server_version_num')::int")
	if err != nil {
		return fmt.Errorf("depgraph: server version: %w", err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&version}, func() error { return nil }); err != nil {
		return fmt.Errorf("depgraph: server version: %w", err)
	}
	a.version = version
	query := functionsQuery
	if version < 140000 {
		query = functionsQuery13
	}
	rows, err = q.Query(ctx, query)
	if err != nil {
		return fmt.Errorf("depgraph: read pg_proc: %w", err)
	}
	var (
		oid                      int64
		schema, name, lang, body string
		bodyPtr                  *string
	)
	_, err = pgx.ForEachRow(rows, []any{&oid, &schema, &name, &lang, &bodyPtr}, func() error {
		body = ""
		if bodyPtr != nil {
			body = *bodyPtr
		}
		f := &userFunc{oid: uint32(oid), schema: schema, name: name, lang: lang, body: body}
		a.funcs[f.oid] = f
		low := strings.ToLower(name)
		a.byName[low] = append(a.byName[low], f.oid)
		a.byName[strings.ToLower(schema)+"."+low] = append(a.byName[strings.ToLower(schema)+"."+low], f.oid)
		return nil
	})
	if err != nil {
		return fmt.Errorf("depgraph: read pg_proc: %w", err)
	}
	// The classifier takes unknown functions to write anything: declare the
	// user functions read-only (they are followed instead) and the
	// built-ins (their side effects on tables are none; the classifier's own
	// list of side-effect functions still wins).
	readOnly := make([]string, 0, len(a.byName)+3000)
	for n := range a.byName {
		readOnly = append(readOnly, n)
	}
	rows, err = q.Query(ctx, "SELECT DISTINCT proname::text FROM pg_proc WHERE pronamespace = 'pg_catalog'::regnamespace")
	if err != nil {
		return fmt.Errorf("depgraph: read pg_proc: %w", err)
	}
	_, err = pgx.ForEachRow(rows, []any{&name}, func() error {
		if ro, listed := catalogReadOnly[name]; ro || !listed {
			readOnly = append(readOnly, name)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("depgraph: read pg_proc: %w", err)
	}
	a.classifier = classify.New(classify.Config{Dialect: classify.Postgres, ReadOnlyFunctions: readOnly, CacheSize: -1})
	return nil
}

// analyzeFunc computes f's direct effects once.
func (a *analyzer) analyzeFunc(f *userFunc) {
	if f.analyzed {
		return
	}
	f.analyzed = true
	switch f.lang {
	case "plpgsql", "sql":
	default:
		f.dynamic = append(f.dynamic, fmt.Sprintf("function %s is in language %s", f, f.lang))
		return
	}
	for _, seg := range splitSegments(lex(f.body)) {
		st := analyzeSegment(f.body, seg)
		if st.dynamic != "" {
			f.dynamic = append(f.dynamic, fmt.Sprintf("function %s: %s", f, st.dynamic))
		}
		for _, c := range st.calls {
			f.calls = append(f.calls, a.byName[c]...)
		}
		if st.sql == "" {
			continue
		}
		r := a.classifier.Classify(st.sql)
		if r.UnknownTables {
			f.dynamic = append(f.dynamic, fmt.Sprintf("function %s: %q: %s", f, short(st.sql), r.Reason))
		}
		for _, w := range r.Writes {
			f.writes = append(f.writes, lsnstore.TableKey(w))
		}
	}
}

// effects returns every table f writes, following its calls, and the
// reasons it may write anything.
func (a *analyzer) effects(f *userFunc) (writes, dynamic []string) {
	seen := map[uint32]bool{}
	stack := []*userFunc{f}
	for len(stack) > 0 {
		g := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[g.oid] {
			continue
		}
		seen[g.oid] = true
		a.analyzeFunc(g)
		writes = append(writes, g.writes...)
		dynamic = append(dynamic, g.dynamic...)
		for _, c := range g.calls {
			if h := a.funcs[c]; h != nil {
				stack = append(stack, h)
			}
		}
	}
	return writes, dynamic
}

const triggersQuery = `
SELECT c.relname::text, t.tgname::text, t.tgfoid::int8, t.tgtype::int, t.tgargs, p.proname::text
FROM pg_trigger t
JOIN pg_class c ON c.oid = t.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_proc p ON p.oid = t.tgfoid
WHERE NOT t.tgisinternal AND n.nspname NOT IN ('pg_catalog', 'information_schema')`

// pg_trigger.tgtype bits.
const (
	tgRow    = 1 << 0
	tgBefore = 1 << 1
	tgInsert = 1 << 2
	tgUpdate = 1 << 4
)

func (a *analyzer) triggers(ctx context.Context, q Querier, g *Graph, m *moves) error {
	rows, err := q.Query(ctx, triggersQuery)
	if err != nil {
		return fmt.Errorf("depgraph: read pg_trigger: %w", err)
	}
	var (
		rel, name, fname string
		foid             int64
		tgtype           int32
		args             []byte
	)
	type trig struct {
		rel, name, fname string
		foid             uint32
		tgtype           int32
		args             []string
	}
	var trigs []trig
	if _, err := pgx.ForEachRow(rows, []any{&rel, &name, &foid, &tgtype, &args, &fname}, func() error {
		var as []string
		if len(args) > 0 {
			as = strings.Split(strings.TrimSuffix(string(args), "\x00"), "\x00")
		}
		trigs = append(trigs, trig{rel, name, fname, uint32(foid), tgtype, as})
		return nil
	}); err != nil {
		return fmt.Errorf("depgraph: read pg_trigger: %w", err)
	}
	for _, t := range trigs {
		from := lsnstore.TableKey(t.rel)
		f := a.funcs[t.foid]
		if t.tgtype&tgRow != 0 && t.tgtype&tgBefore != 0 && t.tgtype&(tgInsert|tgUpdate) != 0 {
			why := fmt.Sprintf("BEFORE trigger %s on %s may change a key of the row it writes", t.name, t.rel)
			for _, c := range beforeTriggerAssigns(f, t.fname, t.args) {
				m.add(from, c, why)
			}
		}
		if f == nil {
			continue // a built-in trigger function (pg_catalog) writes no other row
		}
		writes, dynamic := a.effects(f)
		for _, w := range writes {
			g.effect(from, w, fmt.Sprintf("trigger %s on %s writes %s", t.name, t.rel, w))
		}
		for _, d := range dynamic {
			g.addEverything(from, fmt.Sprintf("trigger %s on %s: %s", t.name, t.rel, d))
		}
	}
	return nil
}

func appendNew(l []string, s string) []string {
	if slices.Contains(l, s) {
		return l
	}
	return append(l, s)
}

const foreignKeysQuery = `
SELECT p.relname::text, c.relname::text
FROM pg_constraint k
JOIN pg_class c ON c.oid = k.conrelid
JOIN pg_class p ON p.oid = k.confrelid
WHERE k.contype = 'f' AND (k.confupdtype IN ('c', 'n', 'd') OR k.confdeltype IN ('c', 'n', 'd'))`

func foreignKeys(ctx context.Context, q Querier, g *Graph) error {
	return eachPgPair(ctx, q, foreignKeysQuery, "pg_constraint", func(parent, child string) {
		p, c := lsnstore.TableKey(parent), lsnstore.TableKey(child)
		g.effect(p, c, fmt.Sprintf("a foreign key of %s cascades to %s", child, p))
	})
}

const foreignTablesQuery = `
SELECT c.relname::text
FROM pg_foreign_table f
JOIN pg_class c ON c.oid = f.ftrelid`

// foreignTables adds table -> Everything for each foreign table: its
// server may be this database (postgres_fdw pointed at itself, or at a
// table another foreign table or trigger leads back from), so a write
// through it may write any table.
func foreignTables(ctx context.Context, q Querier, g *Graph) error {
	rows, err := q.Query(ctx, foreignTablesQuery)
	if err != nil {
		return fmt.Errorf("depgraph: read pg_foreign_table: %w", err)
	}
	var name string
	var names []string
	if _, err := pgx.ForEachRow(rows, []any{&name}, func() error {
		names = append(names, name)
		return nil
	}); err != nil {
		return fmt.Errorf("depgraph: read pg_foreign_table: %w", err)
	}
	for _, n := range names {
		g.addEverything(lsnstore.TableKey(n), fmt.Sprintf("foreign table %s: a write through it may write any table of this database (a loopback server)", n))
	}
	return nil
}

const rulesQuery = `
SELECT c.relname::text, r.rulename::text, pg_get_ruledef(r.oid)
FROM pg_rewrite r
JOIN pg_class c ON c.oid = r.ev_class
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE r.ev_type <> '1' AND n.nspname NOT IN ('pg_catalog', 'information_schema')`

func (a *analyzer) rules(ctx context.Context, q Querier, g *Graph) error {
	rows, err := q.Query(ctx, rulesQuery)
	if err != nil {
		return fmt.Errorf("depgraph: read pg_rewrite: %w", err)
	}
	var rel, name, def string
	type rule struct{ rel, name, def string }
	var rules []rule
	if _, err := pgx.ForEachRow(rows, []any{&rel, &name, &def}, func() error {
		rules = append(rules, rule{rel, name, def})
		return nil
	}); err != nil {
		return fmt.Errorf("depgraph: read pg_rewrite: %w", err)
	}
	for _, r := range rules {
		from := lsnstore.TableKey(r.rel)
		writes, dynamic := a.ruleEffects(r.def)
		for _, w := range writes {
			g.effect(from, w, fmt.Sprintf("rule %s on %s writes %s", r.name, r.rel, w))
		}
		for _, d := range dynamic {
			g.addEverything(from, fmt.Sprintf("rule %s on %s: %s", r.name, r.rel, d))
		}
	}
	return nil
}

// ruleEffects analyses "CREATE RULE r AS ON e TO t [WHERE c] DO [ALSO |
// INSTEAD] { NOTHING | command | ( command ; ... ) }".
func (a *analyzer) ruleEffects(def string) (writes, dynamic []string) {
	toks := lex(def)
	depth := 0
	for i, t := range toks {
		depth = t.nest(depth)
		if depth != 0 || !t.is("do") || i < 4 {
			continue
		}
		j := i + 1
		if j < len(toks) && (toks[j].is("also") || toks[j].is("instead")) {
			j++
		}
		if j < len(toks) && toks[j].is("nothing") {
			return nil, nil
		}
		if j >= len(toks) {
			break
		}
		action := def[toks[j].start:]
		action = strings.TrimSuffix(strings.TrimSpace(action), ";")
		if strings.HasPrefix(action, "(") && strings.HasSuffix(action, ")") {
			action = action[1 : len(action)-1]
		}
		// Functions called by the action are followed.
		for _, c := range calls(lex(action)) {
			for _, oid := range a.byName[c] {
				if f := a.funcs[oid]; f != nil {
					w, d := a.effects(f)
					writes = append(writes, w...)
					dynamic = append(dynamic, d...)
				}
			}
		}
		r := a.classifier.Classify(action)
		if r.UnknownTables {
			dynamic = append(dynamic, fmt.Sprintf("action %q: %s", short(action), r.Reason))
		}
		for _, w := range r.Writes {
			writes = append(writes, lsnstore.TableKey(w))
		}
		return writes, dynamic
	}
	return nil, []string{"rule definition not understood"}
}

const viewsQuery = `
SELECT DISTINCT v.relname::text, t.relname::text, pg_relation_is_updatable(v.oid, false) > 0
FROM pg_rewrite r
JOIN pg_class v ON v.oid = r.ev_class
JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                 AND d.refclassid = 'pg_class'::regclass
JOIN pg_class t ON t.oid = d.refobjid
JOIN pg_namespace n ON n.oid = v.relnamespace
WHERE v.relkind = 'v' AND r.ev_type = '1' AND t.oid <> v.oid
  AND t.relkind IN ('r', 'p', 'v', 'f', 'm')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')`

func views(ctx context.Context, q Querier, g *Graph) error {
	rows, err := q.Query(ctx, viewsQuery)
	if err != nil {
		return fmt.Errorf("depgraph: read views: %w", err)
	}
	var view, table string
	var updatable bool
	type dep struct {
		view, table string
		updatable   bool
	}
	var deps []dep
	count := map[string]int{}
	if _, err := pgx.ForEachRow(rows, []any{&view, &table, &updatable}, func() error {
		deps = append(deps, dep{lsnstore.TableKey(view), lsnstore.TableKey(table), updatable})
		count[lsnstore.TableKey(view)]++
		return nil
	}); err != nil {
		return fmt.Errorf("depgraph: read views: %w", err)
	}
	for _, d := range deps {
		g.alias(d.table, d.view)
		// An automatically updatable view reads exactly one relation: a
		// write through it writes that relation.
		if d.updatable && count[d.view] == 1 {
			g.alias(d.view, d.table)
		}
	}
	return nil
}
