package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"

	"github.com/freshread/freshread/callbacks"
	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/depgraph"
	"github.com/freshread/freshread/internal/engines"
	"github.com/freshread/freshread/internal/lib/breaker"
	"github.com/freshread/freshread/lsnstore"
)

// Plugin is the freshness-routing GORM plugin. Create it with New and
// install it with db.Use; stop its poller with Close.
type Plugin struct {
	cfg Config

	primaryDB *sql.DB
	// primary is the primary's pool the plugin installed: transactions
	// begun from a replica's pool begin there (pool.go).
	primary *primaryPool
	cluster uint64 // the primary's system identifier
	// replicaSet is the replicas reads may go to, replaced whole by
	// SetReplicas (replica_set.go) and never changed in place: a read
	// loads it once, without a lock. setMu serialises the replacements
	// and Close; closing is set by Close under it. gormDB is the *gorm.DB
	// installed on, whose Config opens replicas.
	replicaSet atomic.Pointer[[]*replica]
	setMu      sync.Mutex
	closing    bool
	gormDB     *gorm.DB
	// bufferedDB serves results read in full (buffered_rows.go), opened
	// on first use.
	bufferedOnce sync.Once
	bufferedDB   *sql.DB
	// pinnedTxs are the raw transactions open on pinned connections, by
	// weak.Pointer[sql.Conn]; pinnedConns the connections that have had
	// one, whose collection drops their entries (pinned_tx.go).
	pinnedTxs   sync.Map
	pinnedConns sync.Map
	// deps is the dependency graph (dependents.go), and depSrc the graphs
	// it merges.
	deps   atomic.Pointer[depGraph]
	depMu  sync.Mutex
	depSrc depSources
	// schemaStale: a raise found that the graph may predate a schema
	// change; relearning: the relearning it asks for runs, and staleAt
	// (Unix ns) is when the last began (schema_changes.go).
	schemaStale, relearning atomic.Bool
	staleAt                 atomic.Int64

	engine     engine
	classifier *classify.Classifier
	// keyNames caches, per table, the names of keyed positions
	// (keys.go, *tableKeyNames).
	keyNames sync.Map
	// catalog holds the tables' primary keys read from the catalog
	// (keys_catalog.go).
	catalog catalogKeys

	breaker breaker.Breaker
	// fallbacks limits the reads sent to the primary for want of a fresh
	// replica (Config.MaxFallbackRate); nil: no limit.
	fallbacks *fallbackLimiter
	stats     stats
	// sessions checks session tokens (session_cap.go).
	sessions sessionGuard
	// lastPrimary is the primary's insert position at the last poll.
	lastPrimary atomic.Pointer[lsnstore.Position]
	// floor is a position every Table read must wait for (floor.go); nil
	// when none. directPart (while the tracker's decoding of direct writes
	// is missing or too far behind, Config.DirectWrites) and lossPart
	// (after a store discontinuity, continuity.go, set at lossAt) are its
	// parts, owned by the poller.
	floor      atomic.Pointer[lsnstore.Position]
	directPart *lsnstore.Position
	lossPart   *lsnstore.Position
	lossAt     time.Time
	// verifiedOnce: the store was verified and accepted once (a later
	// change is a discontinuity worth a warning); verifyFailing: the last
	// verification failed (warned once per failing spell).
	verifiedOnce, verifyFailing bool
	// primaryFailing: the last poll of the primary's positions failed
	// (said once per failing spell: notePrimaryPoll); primarySecrets are
	// what its errors must not show in the log (dsnSecrets).
	primaryFailing bool
	primarySecrets []string
	// evictionRisk is evictionUnknown, evictionNo or evictionYes
	// (continuity.go), read by the metrics.
	evictionRisk      atomic.Int32
	evictionCheckedAt time.Time
	evictionWarning   sync.Once
	pending           pendingWrites
	// foldCommit: transactions the plugin begins fold the position read
	// into their COMMIT (commit_fold.go); stmtSQL is the SQL of statements
	// prepared on the primary, for their prepared statements
	// (folded_stmt.go).
	foldCommit bool
	// pgxPrimary: the primary's connections are pgx's with native
	// positions (a prepared pool made at Open keeps foldCommit off but
	// still tags its writes: writer_tag.go).
	pgxPrimary bool
	// primaryPIDs: a pgx connection's PID to the primary is its server
	// process's (no pooler in between: pooler.go).
	primaryPIDs bool
	// primaryPoolModeUnknown: a pooler whose mode could not be probed
	// stands in front of the primary (pooler.go); taken for transaction
	// mode, except where session mode would matter (own_tx.go).
	primaryPoolModeUnknown bool
	// primaryTxPooled: a pooler in front of the primary may move a client
	// connection between server connections between transactions (or its
	// mode is unknown): session locks cannot stand for a connection.
	primaryTxPooled bool
	// mariaNative: MariaDB with native positions; its transactions run
	// on a connection pinned for them, whose server thread's ID (mthreads)
	// follows a COMMIT of unknown outcome (abandoned_commit_mariadb.go).
	mariaNative bool
	mthreads    connValues[uint64]
	stmtSQL     stmtSQL
	// tags: the writer tags of the primary's connections
	// (writer_tag.go); fence: the other processes' lapsed ones
	// (writer_fence.go).
	tags  writerTags
	fence writerFence
	// tick is closed and replaced after every poll, waking MaxWait
	// waiters.
	tick atomic.Pointer[chan struct{}]

	// samples of the primary's position, and when the dependency graph was
	// last checked: owned by the poller goroutine.
	samples       []primarySample
	depsCheckedAt time.Time
	lastPublished map[string]lsnstore.Position // replay positions last published
	// foreignCheckedAt is when the poller last asked whether held foreign
	// transactions ended (foreign_tx.go).
	foreignCheckedAt time.Time
	// replicationCheckedAt is when checkReplication last ran (poller only).
	replicationCheckedAt time.Time
	lastPublishedAt      time.Time
	// discovery is Config.Discovery's state (discovery.go).
	discovery discovery

	foreignTxWarning sync.Once
	// foreignTxDenied says why foreign transactions cannot be followed
	// (a privilege the primary refuses, privileges.go); nil when they can.
	foreignTxDenied error

	// randomPolicy: Config.Policy is dbresolver's RandomPolicy (the
	// default), picked without allocating.
	randomPolicy bool
	// overlapping: reads overlap their store lookup with the replica query
	// (overlap.go): Config.SequentialLookup is off and the store is not
	// the in-memory one.
	overlapping bool
	// batcher batches the overlapped reads' lookups when the store
	// answers batches (batch.go); nil otherwise.
	batcher *lookupBatcher

	initialized atomic.Bool
	stop        chan struct{}
	// life is cancelled when the plugin closes (endLife): the context of
	// work that outlives a poll.
	life      context.Context
	endLife   context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	// The poller's rest (rest.go): lastDemand is when the last read or
	// write came, lastFence when a write last passed its lease's fence
	// (Unix nanoseconds); awaiting counts writes waiting for their lease
	// to end; resting is set while the poller rests, which wake ends;
	// restMu orders a rest's release of the writer lease with fences.
	lastDemand, lastFence atomic.Int64
	awaiting              atomic.Int32
	resting               atomic.Bool
	wake                  chan struct{}
	restMu                sync.RWMutex
	// The shared poll (shared_poll.go): this process's member in the
	// poller's lease, and whether it holds it (set by the poller only).
	pollerMember string
	leading      atomic.Bool
	// A follower's snapshot (shared_poll.go): the newest it applied, read
	// by the poll or carried by a read; the carried one's sequence number
	// last seen; followDue: the next poll reads the snapshot itself (a read
	// found none, or refused the store); waiting: reads waiting for a poll
	// (MaxWait).
	followRefresh time.Duration // followRefresh, but in tests
	followed      atomic.Pointer[followedSnapshot]
	carriedSeq    atomic.Uint64
	followDue     atomic.Bool
	waitingPoll   atomic.Int32
}

// New returns a plugin for cfg. Configuration errors are reported by
// Initialize (that is, by db.Use).
func New(cfg Config) *Plugin {
	_, random := cfg.Policy.(dbresolver.RandomPolicy)
	p := &Plugin{cfg: cfg.withDefaults(), stop: make(chan struct{}), randomPolicy: random || cfg.Policy == nil, followRefresh: followRefresh}
	p.life, p.endLife = context.WithCancel(context.Background())
	_, inMemory := p.cfg.Store.(*lsnstore.Memory)
	p.overlapping = !p.cfg.SequentialLookup && !inMemory
	ch := make(chan struct{})
	p.tick.Store(&ch)
	p.wake = make(chan struct{}, 1)
	p.pollerMember = pollerMember()
	p.lastDemand.Store(time.Now().UnixNano())
	return p
}

// Name implements gorm.Plugin.
func (p *Plugin) Name() string { return "freshread" }

// Initialize implements gorm.Plugin: it validates the configuration, opens
// the replicas, wraps the primary pool so commits publish positions,
// registers the callbacks and starts the replay poller.
func (p *Plugin) Initialize(db *gorm.DB) error {
	if !p.initialized.CompareAndSwap(false, true) {
		if p.gormDB != nil && db.Config == p.gormDB.Config {
			return p.sharedConfig()
		}
		return fmt.Errorf("%w: a Plugin can be installed on one *gorm.DB only", ErrConfig)
	}
	if db.Callback().Query().Get("gorm:db_resolver") != nil {
		return ErrDBResolver
	}
	if db.Dialector.Name() == "mysql" && !engines.MySQLFamilyLinked() {
		// Refused rather than misclassified: mysqlfamily links TiDB's
		// parser, which classifying MySQL and MariaDB statements needs.
		return engines.MySQLFamilyNotLinked("plugin", ErrConfig)
	}
	if err := p.validate(db.Dialector.Name()); err != nil {
		return err
	}
	p.warnStoreClient()
	if l, ok := p.cfg.Store.(lsnstore.Logging); ok {
		l.SetLogger(p.cfg.Logger) // the store's refusals (NOPERM) in the plugin's log
	}
	burst := p.cfg.FallbackBurst
	if burst == 0 {
		burst = int(p.cfg.MaxFallbackRate)
	}
	p.fallbacks = newFallbackLimiter(p.cfg.MaxFallbackRate, burst)
	if ls, ok := p.cfg.Store.(lsnstore.LossyStore); ok {
		// This plugin's own view, which verifies the store's continuity
		// (continuity.go).
		p.cfg.Store = ls.NewReader()
		if l, ok := p.leaser(); ok {
			l.SetLease(p.cfg.WriterLease) // lease.go
		}
	}
	if err := p.checkStoreFormat(); err != nil { // store_format.go
		return err
	}
	// The primary's pool: a *sql.DB, or GORM's prepared-statement cache
	// around one (gorm.Config.PrepareStmt).
	var (
		sqlDB    *sql.DB
		prepared *gorm.PreparedStmtDB
	)
	switch cp := db.ConnPool.(type) {
	case *sql.DB:
		sqlDB = cp
	case *gorm.PreparedStmtDB:
		inner, ok := cp.ConnPool.(*sql.DB)
		if !ok {
			return fmt.Errorf("%w: the prepared-statement pool wraps a %T, want *sql.DB", ErrConfig, cp.ConnPool)
		}
		sqlDB, prepared = inner, cp
	default:
		return fmt.Errorf("%w: the primary pool is a %T, want *sql.DB (install freshread before plugins that wrap the pool, such as sharding)", ErrConfig, db.ConnPool)
	}
	p.primaryDB = sqlDB
	p.primarySecrets = dsnSecrets(db.Dialector)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	isPG := db.Dialector.Name() == "postgres"
	if isPG {
		// A pooler in transaction mode (pooler.go).
		pc, err := p.checkPooler(ctx, "the primary", sqlDB, prepared != nil || db.Config.PrepareStmt)
		if err != nil {
			return err
		}
		// The PID of a primary connection names its server process
		// (abandoned_commit.go) unless a pooler made its own.
		p.primaryPIDs = !pc.behind
		p.primaryTxPooled = pc.txPooled
		p.primaryPoolModeUnknown = pc.unknown
	}
	eng, err := engineFor(ctx, db.Dialector.Name(), sqlDB)
	if err != nil {
		return err
	}
	p.engine = eng
	p.checkForeignTxPrivilege(ctx, sqlDB)
	p.depSrc.learn = pgDependents
	if eng.dialect() == classify.MySQL {
		p.depSrc.learn = depgraph.AnalyzeMySQL
	}
	p.installDependents()
	p.classifier = classify.New(classify.Config{Dialect: eng.dialect(), ReadOnlyFunctions: p.cfg.ReadOnlyFunctions})

	if p.cfg.Positions == Heartbeat {
		hb, err := newHeartbeatEngine(eng, p.cfg.HeartbeatTable)
		if err != nil {
			return err
		}
		if err := hb.prepare(ctx, sqlDB); err != nil {
			return err
		}
		eng, p.engine = hb, hb
	}
	// With pgx and native positions, transactions read the position in
	// their COMMIT's round trip (commit_fold.go). A prepared pool made at
	// Open (gorm.Config.PrepareStmt) keeps the plain *sql.Tx: it may hold
	// statements prepared before the plugin could remember their SQL
	// (folded_stmt.go); one made by a Session later folds.
	_, native := eng.(pgEngine)
	p.pgxPrimary = native && foldsCommit(ctx, sqlDB)
	p.foldCommit = p.pgxPrimary && prepared == nil
	_, maria := eng.(*mariaEngine)
	p.mariaNative = maria
	p.initWriterTags(maria)
	if p.cluster, err = eng.identify(ctx, sqlDB); err != nil {
		return err
	}
	if err := p.checkPositionPrivilege(ctx, sqlDB); err != nil {
		return err
	}
	if fns, err := eng.readOnlyFunctions(ctx, sqlDB); err != nil {
		p.cfg.Logger.Warn("freshread: user functions stay classified as writes", "err", err)
	} else {
		p.classifier.AddReadOnlyFunctions(fns...)
	}

	p.gormDB = db
	replicas, err := p.openReplicas(ctx, p.cfg.Replicas, nil)
	if err != nil {
		return err
	}
	p.replicaSet.Store(&replicas)
	var discoveryErr error
	if p.cfg.Discovery != nil {
		// The first lookup before the first poll: the replicas found are
		// polled with the others before Initialize returns.
		discoveryErr = p.refreshDiscovery(ctx)
	}

	pool := &primaryPool{ConnPool: sqlDB, db: sqlDB, p: p}
	p.primary = pool
	if prepared != nil {
		// GORM's prepared-statement pool begins transactions through
		// ours (a ConnPoolBeginner) and wraps the trackedTx.
		prepared.ConnPool = pool
	} else {
		db.Config.ConnPool = pool
		db.Statement.ConnPool = pool
	}
	if err := callbacks.RegisterFreshness(db, hooks{p}); err != nil {
		return err
	}
	if err := p.registerResolverHooks(db); err != nil { // resolver_use.go
		return err
	}
	p.refreshDependents(ctx, time.Now(), false)
	if p.cfg.Announce {
		if err := p.announce(ctx, db, p.cfg.Replicas); err != nil {
			return err
		}
	}
	p.pollOnce(ctx, true)
	if br, ok := p.cfg.Store.(lsnstore.BatchReader); ok && p.overlapping {
		p.batcher = newLookupBatcher(p, br)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.batcher.run(p.stop)
		}()
	}
	p.wg.Add(1)
	go p.poll()
	if p.cfg.Discovery != nil {
		p.wg.Add(1)
		go p.discover(discoveryErr)
	}
	return nil
}

func (p *Plugin) validate(dialector string) error {
	if dialector != "postgres" && dialector != "mysql" {
		return fmt.Errorf("%w: dialector %q is not supported (postgres, mysql)", ErrConfig, dialector)
	}
	if p.cfg.MaxFallbackRate < 0 || p.cfg.FallbackBurst < 0 {
		return fmt.Errorf("%w: MaxFallbackRate %v and FallbackBurst %d must not be negative", ErrConfig, p.cfg.MaxFallbackRate, p.cfg.FallbackBurst)
	}
	if err := validateReplicas(p.cfg.Replicas, dialector); err != nil {
		return err
	}
	if err := p.cfg.Discovery.validate(); err != nil {
		return err
	}
	if c, ok := p.cfg.Store.(lsnstore.Checked); ok {
		if err := c.Err(); err != nil {
			// Every call of the store would fail, and every read go to
			// the primary: refused now rather than found in the metrics.
			return fmt.Errorf("%w: the position store is unusable: %w", ErrConfig, err)
		}
	}
	if e, ok := p.cfg.Store.(lsnstore.Expirer); ok && p.cfg.MaxLag >= e.KeyTTL() {
		return fmt.Errorf("%w: MaxLag (%v) must be shorter than the store's key TTL (%v): a replica lagging longer could miss an expired write position", ErrConfig, p.cfg.MaxLag, e.KeyTTL())
	}
	if p.cfg.MaxWait < 0 {
		return fmt.Errorf("%w: MaxWait is negative", ErrConfig)
	}
	return nil
}

// warnStoreClient warns, once per plugin, when the store's client ignores
// the store's deadlines on its sockets (lsnstore.ClientTimeouts): a Redis
// that stops answering then holds a read for go-redis's ReadTimeout (5 s
// by default), not the store's Timeout.
func (p *Plugin) warnStoreClient() {
	c, ok := p.cfg.Store.(lsnstore.ClientTimeouts)
	if !ok {
		return
	}
	if enabled, known := c.ContextTimeouts(); known && !enabled {
		p.cfg.Logger.Warn("freshread: the position store's go-redis client ignores context deadlines on its sockets, so a Redis that stops answering holds reads for the client's ReadTimeout instead of the store's Timeout: build the client with ContextTimeoutEnabled: true",
			"option", "ContextTimeoutEnabled")
	}
}

// openReplica opens a replica's pool. An unreachable replica is not fatal:
// it starts marked down. A reachable server that is not in recovery is.
func (p *Plugin) openReplica(ctx context.Context, db *gorm.DB, rc Replica) (*replica, error) {
	conf := *db.Config
	conf.ConnPool = nil
	conf.Plugins = map[string]gorm.Plugin{}
	conf.DisableAutomaticPing = true // a replica that is down now starts marked down
	rdb, err := gorm.Open(withoutVersionQuery(rc.Dialector), &conf)
	var sqlDB *sql.DB
	if err == nil {
		sqlDB, err = rdb.DB()
	}
	if err != nil {
		return nil, fmt.Errorf("plugin: open replica %q: %w", rc.Name, err)
	}
	pool := rc.Pool.over(p.cfg.ReplicaPool)
	pool.apply(sqlDB) // replica_pool.go
	r := &replica{name: rc.Name, db: sqlDB, secrets: dsnSecrets(rc.Dialector)}
	r.pool = &replicaPool{ConnPool: sqlDB, r: r, p: p}
	r.state.Store(&replicaState{})
	isReplica, err := p.engine.isReplica(ctx, sqlDB)
	switch {
	case err == nil && !isReplica:
		sqlDB.Close()
		return nil, fmt.Errorf("%w: %q does not replicate from a primary (it is a primary itself)", ErrNotReplica, rc.Name)
	case err != nil && privilegeDenied(err):
		p.warnReplicaPrivilege(ctx, r, err)
	}
	// The DSN must reach one server (endpoint.go): refused when
	// connections opened at once reach several; unverified (the first
	// poll that answers verifies it) when the replica is down now.
	if si, ok := identifierOf(p.engine); ok {
		e := &endpoint{name: rc.Name, read: serverIdentity(si.identityExpr()), log: p.cfg.Logger, secrets: r.secrets, idle: pool.MaxIdleConns}
		if err == nil {
			if verr := e.verify(ctx, sqlDB); errors.Is(verr, ErrSeveralServers) {
				sqlDB.Close()
				return nil, verr
			}
		}
		watchEndpoint(sqlDB, e)
	}
	return r, nil
}

// withoutVersionQuery returns d, or for a MySQL dialector that would ask
// the server its version when opened (gorm's mysql driver does unless
// Config.SkipInitializeWithVersion), a copy that does not: that query
// failed the open, and so db.Use, when a MariaDB or MySQL replica was
// down, where a replica that is down must start marked down. The version
// only chooses the SQL a *gorm.DB builds, and statements sent to a
// replica are built by the primary's *gorm.DB, never by the replica's.
//
// mysqlfamily does it (engines.MySQLDriver); without it a MySQL dialector
// is refused before (Initialize, engineFor).
func withoutVersionQuery(d gorm.Dialector) gorm.Dialector {
	if engines.MySQL == nil {
		return d
	}
	return engines.MySQL.WithoutVersionQuery(d)
}

// Close stops the poller and closes the replicas' pools. The primary pool
// belongs to the caller's *gorm.DB and stays open.
func (p *Plugin) Close() error {
	p.closeOnce.Do(func() {
		p.setMu.Lock()
		p.closing = true // no SetReplicas from now on
		p.setMu.Unlock()
		close(p.stop)
		if p.endLife != nil {
			p.endLife()
		}
		p.wg.Wait()
		p.releaseLease()
		p.closeReplicas()
		p.buffered().Close()
	})
	return nil
}

func (p *Plugin) closeReplicas() {
	for _, r := range p.replicas() {
		r.db.Close()
	}
}

// closeDependents returns the transitive closure of deps with names as
// store keys: writing t writes every table reachable from t.
func closeDependents(deps map[string][]string) map[string][]string {
	if len(deps) == 0 {
		return nil
	}
	keyed := make(map[string][]string, len(deps))
	for t, ds := range deps {
		k := lsnstore.TableKey(t)
		for _, d := range ds {
			keyed[k] = append(keyed[k], lsnstore.TableKey(d))
		}
	}
	return lsnstore.CloseGraph(keyed)
}
