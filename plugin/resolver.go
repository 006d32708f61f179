package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"

	"github.com/freshread/freshread/callbacks"
	"github.com/freshread/freshread/lsnstore"
)

// Resolver routes the statements of some models and tables to resolvers of
// their own, as gorm.io/plugin/dbresolver's DBResolver does: each resolver
// has its replicas and, with Config.Sources, its own primary, and keeps
// the freshness of its reads with a Plugin of its own. Create it with
// Register, add resolvers with its Register method, install it with
// db.Use, and stop it with Close.
//
// A statement goes to the resolver its dbresolver.Use clause names, else
// to the resolver of its table (the model's table, db.Table, or the first
// table of raw SQL, as dbresolver finds it), else to the default resolver,
// the Plugin installed on the *gorm.DB itself. A statement inside a
// transaction runs in that transaction: begin a resolver's transaction
// with db.Clauses(dbresolver.Use(name)).Transaction (or Begin).
type Resolver struct {
	regs []registration
	// late: Register was called after db.Use (reported by every
	// statement: the registration is not applied).
	late atomic.Bool

	def     *Plugin
	members []*member
	byName  map[string]*member
	// opened are the *sql.DB pools the resolver opened, closed by Close.
	opened    []*sql.DB
	closeOnce sync.Once
	once      atomic.Bool
}

// registration is one Register call.
type registration struct {
	cfg   Config
	datas []any
}

// member is a resolver registered for models and tables: one *gorm.DB per
// source, each with its Plugin; reads go through the first, which has the
// replicas.
type member struct {
	names  []string
	dbs    []*gorm.DB
	plugs  []*Plugin
	pools  []gorm.ConnPool // the sources' primary pools, for Policy
	policy dbresolver.Policy
}

// Register returns a Resolver with one resolver: cfg for the models
// (struct pointers) and table names in datas, or the default resolver
// when datas is empty (then cfg is that of New). It is dbresolver's
// Register: dbresolver.Register(dbresolver.Config{...}, &Order{}, "orders")
// becomes plugin.Register(plugin.Config{...}, &Order{}, "orders"), with
// named replicas.
func Register(cfg Config, datas ...any) *Resolver {
	return (&Resolver{}).Register(cfg, datas...)
}

// Register adds a resolver (see the function Register) and returns r.
// Call it before db.Use: a registration made later is not applied, and
// every statement then fails with ErrConfig.
func (r *Resolver) Register(cfg Config, datas ...any) *Resolver {
	if r.once.Load() {
		r.late.Store(true)
		return r
	}
	r.regs = append(r.regs, registration{cfg: cfg, datas: datas})
	return r
}

// Name implements gorm.Plugin: a Resolver takes the place of a Plugin.
func (r *Resolver) Name() string { return "freshread" }

// Default is the default resolver's Plugin (installed on the *gorm.DB
// itself): its Collector, RecordWrite and Session serve the statements no
// other resolver takes. Nil before db.Use.
func (r *Resolver) Default() *Plugin { return r.def }

// Plugin is the Plugin of the resolver registered for name (a table name
// or a name given to Register), the one that routes its reads; nil when
// no resolver has that name.
func (r *Resolver) Plugin(name string) *Plugin {
	if m := r.byName[name]; m != nil {
		return m.plugs[0]
	}
	return nil
}

// Initialize implements gorm.Plugin: it installs the default resolver's
// Plugin on db, opens every other resolver's sources with a Plugin each,
// and registers the callbacks that send statements to them.
func (r *Resolver) Initialize(db *gorm.DB) (err error) {
	if !r.once.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: a Resolver can be installed on one *gorm.DB only", ErrConfig)
	}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	var defCfg *Config
	for i := range r.regs {
		if len(r.regs[i].datas) > 0 {
			continue
		}
		if defCfg != nil {
			return fmt.Errorf("%w: Register: two default resolvers (a Config without models or tables); give one of them its models", ErrConfig)
		}
		defCfg = &r.regs[i].cfg
	}
	if defCfg == nil {
		defCfg = &Config{}
	}
	if len(defCfg.Sources) > 0 {
		return fmt.Errorf("%w: Register: the default resolver has Sources; open the *gorm.DB on that source instead (gorm.Open(source)): its Plugin publishes the writes made there", ErrConfig)
	}
	r.def = New(*defCfg)
	store := r.def.cfg.Store // the caller's store, before Initialize wraps it
	if err := r.def.Initialize(db); err != nil {
		return err
	}
	r.byName = map[string]*member{}
	replicaNames := map[string]bool{}
	for _, rc := range r.def.cfg.Replicas {
		replicaNames[rc.Name] = true
	}
	for _, reg := range r.regs {
		if len(reg.datas) == 0 {
			continue
		}
		m, err := r.open(db, reg, store, replicaNames)
		if err != nil {
			return err
		}
		r.members = append(r.members, m)
	}
	return r.registerCallbacks(db)
}

// open opens one registered resolver: its names, then a *gorm.DB and a
// Plugin per source.
func (r *Resolver) open(db *gorm.DB, reg registration, defStore lsnstore.Store, replicaNames map[string]bool) (*member, error) {
	m := &member{policy: reg.cfg.Policy}
	if m.policy == nil {
		m.policy = dbresolver.RandomPolicy{}
	}
	for _, d := range reg.datas {
		name, err := dataName(db, d)
		if err != nil {
			return nil, err
		}
		if r.byName[name] != nil {
			return nil, fmt.Errorf("%w: Register: %q has two resolvers", ErrConfig, name)
		}
		r.byName[name] = m
		m.names = append(m.names, name)
	}
	cfg := reg.cfg
	sources := cfg.Sources
	if len(sources) == 0 {
		// The *gorm.DB's own primary: the positions are that primary's,
		// so they share the default resolver's store (a write of these
		// tables in a transaction of the *gorm.DB is published there).
		sources = []gorm.Dialector{db.Dialector}
		if cfg.Store == nil {
			cfg.Store = defStore
			// The default's poll snapshot in that store holds the
			// default's replicas, not these: this resolver polls its own.
			cfg.PollerLease = -1
		}
	} else if cfg.Store == nil {
		if _, ok := defStore.(*lsnstore.Memory); !ok {
			return nil, fmt.Errorf("%w: Register: the resolver of %q has Sources of its own but no Store; give it one (another lsnstore.RedisOptions.Database): positions of different primaries cannot share a store", ErrConfig, m.names[0])
		}
	}
	for _, rc := range cfg.Replicas {
		if replicaNames[rc.Name] {
			return nil, fmt.Errorf("%w: Register: replica name %q is used by two resolvers; names must be unique across resolvers", ErrConfig, rc.Name)
		}
		replicaNames[rc.Name] = true
	}
	mainDB, _ := db.DB()
	for i, d := range sources {
		conf := *db.Config
		conf.ConnPool = nil
		conf.Plugins = map[string]gorm.Plugin{}
		conf.PrepareStmt = false
		sub, err := gorm.Open(d, &conf)
		if err != nil {
			return nil, fmt.Errorf("plugin: open source %d of the resolver of %q: %w", i, m.names[0], err)
		}
		if sdb, err := sub.DB(); err == nil && sdb != mainDB {
			r.opened = append(r.opened, sdb)
		}
		c := cfg
		if i > 0 {
			c.Replicas = nil // reads go through the first source's Plugin
		}
		p := New(c)
		if err := sub.Use(p); err != nil {
			return nil, fmt.Errorf("plugin: the resolver of %q: %w", m.names[0], err)
		}
		if i > 0 && p.cluster != m.plugs[0].cluster {
			p.Close()
			return nil, fmt.Errorf("%w: Register: the Sources of the resolver of %q reach different primaries (source 0 and source %d); freshread keeps one primary's positions per resolver: register one resolver per primary", ErrConfig, m.names[0], i)
		}
		m.dbs = append(m.dbs, sub)
		m.plugs = append(m.plugs, p)
		m.pools = append(m.pools, sub.Config.ConnPool)
	}
	return m, nil
}

// dataName is the name a model or a table name registers.
func dataName(db *gorm.DB, d any) (string, error) {
	if s, ok := d.(string); ok {
		if s == "" {
			return "", fmt.Errorf("%w: Register: an empty table name", ErrConfig)
		}
		return s, nil
	}
	stmt := &gorm.Statement{DB: db}
	if err := stmt.Parse(d); err != nil {
		return "", fmt.Errorf("%w: Register: %T is neither a model nor a table name: %w", ErrConfig, d, err)
	}
	return stmt.Table, nil
}

// Close stops every resolver's Plugin and closes the pools the Resolver
// opened. The *gorm.DB's own pool stays open.
func (r *Resolver) Close() error {
	r.closeOnce.Do(func() {
		if r.def != nil {
			r.def.Close()
		}
		for _, m := range r.members {
			for _, p := range m.plugs {
				p.Close()
			}
		}
		for _, db := range r.opened {
			db.Close()
		}
	})
	return nil
}

// Names of the Resolver's callbacks. dbresolver's Use and Write call the
// callback named "gorm:db_resolver" when the clause is added, so that a
// transaction begun from the statement begins on the resolver's primary.
const (
	resolverRoute  = "freshread:resolver"
	resolverFinish = "freshread:resolver_finish"
	resolverClause = "gorm:db_resolver"
)

func (r *Resolver) registerCallbacks(db *gorm.DB) error {
	cb := db.Callback()
	route := func(c callbacks.Chain) func(*gorm.DB) { return func(db *gorm.DB) { r.route(c, db) } }
	regs := []error{
		cb.Create().Before("*").Register(resolverRoute, route(callbacks.Create)),
		cb.Query().Before("*").Register(resolverRoute, route(callbacks.Query)),
		cb.Row().Before("*").Register(resolverRoute, route(callbacks.Row)),
		cb.Update().Before("*").Register(resolverRoute, route(callbacks.Update)),
		cb.Delete().Before("*").Register(resolverRoute, route(callbacks.Delete)),
		cb.Raw().Before("*").Register(resolverRoute, route(callbacks.Raw)),
		cb.Create().After("*").Register(resolverFinish, finishResolved),
		cb.Query().After("*").Register(resolverFinish, finishResolved),
		cb.Row().After("*").Register(resolverFinish, finishResolved),
		cb.Update().After("*").Register(resolverFinish, finishResolved),
		cb.Delete().After("*").Register(resolverFinish, finishResolved),
		cb.Raw().After("*").Register(resolverFinish, finishResolved),
		cb.Query().Register(resolverClause, r.useClause),
	}
	if err := errors.Join(regs...); err != nil {
		return fmt.Errorf("plugin: register the resolver's callbacks: %w", err)
	}
	return nil
}

// resolverPool is the pool of a statement a dbresolver.Use clause sent to
// a resolver: a transaction begun on it begins on the resolver's source.
type resolverPool struct {
	gorm.ConnPool // the source's primary pool
	m             *member
	src           int
}

var _ gorm.ConnPoolBeginner = (*resolverPool)(nil)

func (p *resolverPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	var (
		tx  gorm.ConnPool
		err error
	)
	switch b := p.ConnPool.(type) {
	case gorm.ConnPoolBeginner:
		tx, err = b.BeginTx(ctx, opts)
	case gorm.TxBeginner:
		tx, err = b.BeginTx(ctx, opts)
	default:
		return nil, fmt.Errorf("plugin: the resolver of %q: pool %T cannot begin a transaction", p.m.names[0], p.ConnPool)
	}
	if err != nil {
		return nil, err
	}
	return &resolverTx{ConnPool: tx, m: p.m, src: p.src}, nil
}

// resolverTx is a transaction on a resolver's source: its statements run
// there, in it.
type resolverTx struct {
	gorm.ConnPool // the source's transaction
	m             *member
	src           int
}

var _ gorm.TxCommitter = (*resolverTx)(nil)

func (t *resolverTx) Commit() error {
	c, ok := t.ConnPool.(gorm.TxCommitter)
	if !ok {
		return fmt.Errorf("plugin: the resolver's transaction %T cannot commit", t.ConnPool)
	}
	return c.Commit()
}

func (t *resolverTx) Rollback() error {
	c, ok := t.ConnPool.(gorm.TxCommitter)
	if !ok {
		return fmt.Errorf("plugin: the resolver's transaction %T cannot roll back", t.ConnPool)
	}
	return c.Rollback()
}

// useClause runs when a dbresolver.Use (or Write) clause is added, and
// last on the Query chain: it gives a statement outside a transaction
// that names a resolver that resolver's pool, so that a transaction begun
// from it begins there.
func (r *Resolver) useClause(db *gorm.DB) {
	if db.Error != nil || r.byName == nil {
		return
	}
	name, ok := usedName(db.Statement)
	if !ok {
		return
	}
	switch db.Statement.ConnPool.(type) {
	case gorm.TxCommitter, *sql.Conn, *resolverPool:
		return
	}
	if m := r.byName[name]; m != nil {
		src := m.pickSource(true)
		db.Statement.ConnPool = &resolverPool{ConnPool: m.pools[src], m: m, src: src}
	}
}

// pickSource is the source a statement runs on: a write's by Policy, a
// read's the first (its Plugin has the replicas).
func (m *member) pickSource(write bool) int {
	if !write || len(m.pools) == 1 {
		return 0
	}
	return max(0, slices.Index(m.pools, m.policy.Resolve(m.pools)))
}

// resolved parks the chain of the *gorm.DB a statement was taken from
// once it has run on its resolver; finishResolved replaces it with the
// statement's outcome.
type resolved struct {
	err  error
	rows int64
}

func (*resolved) Error() string { return "plugin: statement ran on its resolver" }

func finishResolved(db *gorm.DB) {
	if rs, ok := db.Error.(*resolved); ok {
		db.Error, db.RowsAffected = rs.err, rs.rows
		// Already logged by the resolver's chain.
		db.Statement.SQL.Reset()
		db.Statement.Vars = nil
	}
}

// route runs a statement of chain c on its resolver, when it has one
// other than the default.
func (r *Resolver) route(c callbacks.Chain, db *gorm.DB) {
	if db.Error != nil {
		return
	}
	if r.late.Load() {
		db.AddError(fmt.Errorf("%w: Resolver.Register was called after db.Use; register every resolver before installing it", ErrConfig))
		return
	}
	m, src, conn, err := r.memberOf(c, db)
	if err != nil {
		db.AddError(err)
		return
	}
	if m == nil {
		return // the default resolver's Plugin routes it
	}
	sub := db.Session(&gorm.Session{Initialized: true})
	on := m.dbs[src]
	sub.Config = on.Config
	if conn == nil {
		conn = on.Config.ConnPool
	}
	sub.Statement.ConnPool = conn
	delete(sub.Statement.Clauses, usingClause)
	cb := on.Callback()
	switch c {
	case callbacks.Create:
		cb.Create().Execute(sub)
	case callbacks.Query:
		cb.Query().Execute(sub)
	case callbacks.Row:
		cb.Row().Execute(sub)
		db.Statement.Dest = sub.Statement.Dest // the *sql.Row or *sql.Rows
	case callbacks.Update:
		cb.Update().Execute(sub)
	case callbacks.Delete:
		cb.Delete().Execute(sub)
	default:
		cb.Raw().Execute(sub)
	}
	db.Error = &resolved{err: sub.Error, rows: sub.RowsAffected}
}

// memberOf is the resolver of a statement (nil: the default), the source
// it runs on and, inside a resolver's transaction, that transaction.
func (r *Resolver) memberOf(c callbacks.Chain, db *gorm.DB) (*member, int, gorm.ConnPool, error) {
	stmt := db.Statement
	name, used := usedName(stmt)
	write := c != callbacks.Query && c != callbacks.Row
	switch pool := stmt.ConnPool.(type) {
	case *resolverTx:
		if used && r.byName[name] != pool.m {
			return nil, 0, nil, fmt.Errorf("%w: dbresolver.Use(%q) inside a transaction begun on the resolver of %q: a transaction runs on one resolver", ErrUnknownResolver, name, pool.m.names[0])
		}
		return pool.m, pool.src, pool.ConnPool, nil
	case *resolverPool:
		return pool.m, pool.m.pickSource(write), nil, nil
	case gorm.TxCommitter, *sql.Conn, *gorm.PreparedStmtTX, *replaySession:
		if used {
			return nil, 0, nil, fmt.Errorf("%w: dbresolver.Use(%q) inside a transaction or on a connection of the default database: begin the transaction with db.Clauses(dbresolver.Use(%q)).Transaction", ErrUnknownResolver, name, name)
		}
		return nil, 0, nil, nil // stays in its transaction, as with dbresolver
	}
	if used {
		m := r.byName[name]
		if m == nil {
			return nil, 0, nil, fmt.Errorf("%w: dbresolver.Use(%q): no resolver was registered for that name (registered: %v)", ErrUnknownResolver, name, r.names())
		}
		return m, m.pickSource(write), nil, nil
	}
	if len(r.byName) == 0 {
		return nil, 0, nil, nil
	}
	if m := r.tableMember(stmt); m != nil {
		return m, m.pickSource(write), nil, nil
	}
	return nil, 0, nil, nil
}

// tableMember is the resolver of a statement's table, looked up as
// dbresolver does: by the statement's table, its model's, its schema's,
// then the first table of its raw SQL, the first that has a resolver (raw
// SQL scanned into a struct has that struct's table too).
func (r *Resolver) tableMember(stmt *gorm.Statement) *member {
	if m := r.byName[stmt.Table]; m != nil && stmt.Table != "" {
		return m
	}
	if stmt.Model != nil {
		if err := stmt.Parse(stmt.Model); err == nil && stmt.Table != "" {
			if m := r.byName[stmt.Table]; m != nil {
				return m
			}
		}
	}
	if stmt.Schema != nil {
		if m := r.byName[stmt.Schema.Table]; m != nil {
			return m
		}
	}
	if stmt.SQL.Len() > 0 {
		return r.byName[rawSQLTable(stmt.SQL.String())]
	}
	return nil
}

func (r *Resolver) names() []string {
	names := make([]string, 0, len(r.byName))
	for n := range r.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
