package sharding

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"gorm.io/gorm"

	"github.com/freshread/freshread/callbacks"
	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/internal/engines"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/sharding/internal/sqltext"
)

// Sharding is the GORM plugin that routes statements on sharded tables to
// their shard. Install it on the *gorm.DB of the default database with
// db.Use(sharding.New(cfg)), after a freshread plugin if there is one.
type Sharding struct {
	cfg Config

	shards []*shard
	byName map[string]*shard
	tables map[string]*tableInfo // by normalized name

	// rt is the bucket map routing uses (one immutable snapshot, swapped
	// by the map follower, mapfollow.go); fol follows Config.Map (nil
	// without one).
	rt    atomic.Pointer[routing]
	fol   *follower
	stats mapStats
	tp    twoPhase // two-phase commit of writes over several shards (twophase.go)

	classifier *classify.Classifier

	coll  collationCache  // text collation of the shards (merge)
	tcoll tableCollations // text collations of the merged tables' columns (merge_collation.go)

	initialized atomic.Bool
	opened      []*gorm.DB
	plugins     []*plugin.Plugin
}

type shard struct {
	name  string
	index int
	db    *gorm.DB
	pool  *shardPool // pins a session to the shard (On)
}

func (s *shard) sqlDB() (*sql.DB, error) { return s.db.DB() }

type tableInfo struct {
	Table
	name string // normalized
	key  string // lower case
	id   string // lower case
}

// New returns a plugin for cfg; db.Use reports configuration errors.
func New(cfg Config) *Sharding { return &Sharding{cfg: cfg} }

// Name implements gorm.Plugin.
func (s *Sharding) Name() string { return "freshread:sharding" }

// Initialize implements gorm.Plugin: it validates the configuration, opens
// the shards given by Dialector and registers the routing callbacks.
func (s *Sharding) Initialize(db *gorm.DB) error {
	if !s.initialized.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: a Sharding can be installed on one *gorm.DB only", ErrConfig)
	}
	s.tp.init()
	if err := s.setup(db); err != nil {
		s.Close()
		return err
	}
	s.classifier = classify.New(classify.Config{Dialect: classify.Postgres})
	if err := callbacks.RegisterSharding(db, newShardHooks(s)); err != nil {
		s.Close()
		return err
	}
	s.wrapDefaultPool(db)
	s.startFollower()
	s.recoverAtStart() // parts a process before this one left prepared
	return nil
}

// wrapDefaultPool installs defaultPool on the default database, so that
// the transactions begun there bind to the database of their first
// statement (tx.go). GORM's prepared-statement pool (PrepareStmt) is left
// as it is: its transactions must be *sql.Tx-like, so a transaction begun
// there stays on the default database and refuses sharded tables.
func (s *Sharding) wrapDefaultPool(db *gorm.DB) {
	pool := db.Config.ConnPool
	switch pool.(type) {
	case *gorm.PreparedStmtDB, gorm.TxCommitter:
		return
	case gorm.ConnPoolBeginner, gorm.TxBeginner:
	default:
		return
	}
	dp := &defaultPool{ConnPool: pool, s: s}
	db.Config.ConnPool = dp
	if db.Statement != nil && db.Statement.ConnPool == pool {
		db.Statement.ConnPool = dp
	}
}

func (s *Sharding) setup(db *gorm.DB) error {
	cfg := s.cfg
	if len(cfg.Shards) == 0 || len(cfg.Shards) > 64 {
		return fmt.Errorf("%w: %d shards (want 1..64)", ErrConfig, len(cfg.Shards))
	}
	if len(cfg.Tables) == 0 {
		return fmt.Errorf("%w: no sharded table", ErrConfig)
	}
	s.byName = make(map[string]*shard, len(cfg.Shards))
	names := make([]string, len(cfg.Shards))
	for i, sc := range cfg.Shards {
		if sc.Name == "" {
			return fmt.Errorf("%w: shard %d has no Name", ErrConfig, i)
		}
		if s.byName[sc.Name] != nil {
			return fmt.Errorf("%w: duplicate shard %q", ErrConfig, sc.Name)
		}
		if shardDialect(sc) == "mysql" && !engines.MySQLFamilyLinked() {
			// The lookup's commit outcomes (sqlerr.Refused) and the shard's
			// plugin classify MariaDB's and MySQL's errors and statements
			// with what mysqlfamily links: refused rather than misread.
			return engines.MySQLFamilyNotLinked("sharding", ErrConfig)
		}
		sdb, err := s.openShard(db, sc)
		if err != nil {
			return err
		}
		if sdb.Config == db.Config {
			return fmt.Errorf("%w: shard %q shares its *gorm.Config with the default database (open each with its own gorm.Config)", ErrConfig, sc.Name)
		}
		for _, other := range s.shards {
			if other.db.Config == sdb.Config {
				return fmt.Errorf("%w: shards %q and %q share a *gorm.Config", ErrConfig, other.name, sc.Name)
			}
		}
		sh := &shard{name: sc.Name, index: i, db: sdb}
		sh.pool = &shardPool{ConnPool: sdb.Config.ConnPool, sh: sh}
		s.shards = append(s.shards, sh)
		s.byName[sc.Name] = sh
		names[i] = sc.Name
	}
	m, err := MapFromAlgorithm(cfg.Algorithm, names, cfg.HotUsers)
	if err != nil {
		return err
	}
	rt, err := newRouting(m, cfg.Algorithm.Buckets(), s.byName)
	if err != nil {
		return err
	}
	s.rt.Store(rt)
	if err := s.setupMap(); err != nil {
		return err
	}
	s.tables = make(map[string]*tableInfo, len(cfg.Tables))
	for _, t := range cfg.Tables {
		if t.Name == "" || t.Key == "" {
			return fmt.Errorf("%w: a sharded table needs Name and Key", ErrConfig)
		}
		if t.Lookup && (cfg.Lookup == nil || t.ID == "") {
			return fmt.Errorf("%w: table %q has Lookup but no Config.Lookup or Table.ID", ErrConfig, t.Name)
		}
		ti := &tableInfo{Table: t, name: sqltext.NormalizeTable(t.Name), key: strings.ToLower(t.Key), id: strings.ToLower(t.ID)}
		s.tables[ti.name] = ti
	}
	return nil
}

// shardDialect is the name of the dialector of the shard sc.
func shardDialect(sc ShardConfig) string {
	switch {
	case sc.DB != nil && sc.DB.Dialector != nil:
		return sc.DB.Dialector.Name()
	case sc.Dialector != nil:
		return sc.Dialector.Name()
	}
	return ""
}

// openShard returns the shard's *gorm.DB, opening it from its Dialector
// (with a freshread plugin when it has replicas).
func (s *Sharding) openShard(db *gorm.DB, sc ShardConfig) (*gorm.DB, error) {
	if sc.DB != nil {
		return sc.DB, nil
	}
	if sc.Dialector == nil {
		return nil, fmt.Errorf("%w: shard %q has neither DB nor Dialector", ErrConfig, sc.Name)
	}
	conf := *db.Config
	conf.ConnPool = nil
	conf.Plugins = map[string]gorm.Plugin{}
	conf.Dialector = nil
	sdb, err := gorm.Open(sc.Dialector, &conf)
	if err != nil {
		return nil, fmt.Errorf("sharding: open shard %q: %w", sc.Name, err)
	}
	s.opened = append(s.opened, sdb)
	if len(sc.Replicas) > 0 {
		fc := sc.Freshness
		fc.Replicas = sc.Replicas
		p := plugin.New(fc)
		if err := sdb.Use(p); err != nil {
			return nil, fmt.Errorf("sharding: shard %q: %w", sc.Name, err)
		}
		s.plugins = append(s.plugins, p)
	}
	return sdb, nil
}

// Close stops the map follower and the freshread plugins of the shards
// the plugin opened and closes their pools. Shards given as DB stay open.
func (s *Sharding) Close() error {
	s.stopFollower()
	s.stopTwoPhase()
	var errs []error
	for _, p := range s.plugins {
		errs = append(errs, p.Close())
	}
	for _, d := range s.opened {
		if sqlDB, err := d.DB(); err == nil {
			errs = append(errs, sqlDB.Close())
		}
	}
	s.plugins, s.opened = nil, nil
	return errors.Join(errs...)
}

// ShardNames returns the shard names in configuration order.
func (s *Sharding) ShardNames() []string {
	out := make([]string, len(s.shards))
	for i, sh := range s.shards {
		out[i] = sh.name
	}
	return out
}

// ShardDB returns the *gorm.DB of the named shard (admin work, tests).
func (s *Sharding) ShardDB(name string) (*gorm.DB, bool) {
	sh := s.byName[name]
	if sh == nil {
		return nil, false
	}
	return sh.db, true
}

// ShardOf returns the name of the shard that holds userID's rows, as the
// current bucket map says.
func (s *Sharding) ShardOf(userID int64) string {
	return s.shards[placer{rt: s.rt.Load()}.key(userID)].name
}

// routeCode is the route code an ID minted for userID embeds: its bucket,
// or for a hot user the index of its shard in rt.
func (s *Sharding) routeCode(rt *routing, userID int64) int {
	if i, ok := rt.hot[userID]; ok {
		return routeHot | i
	}
	return rt.bucketOf(userID)
}

// NewID mints an ID for a row of userID with Config.IDs.
func (s *Sharding) NewID(userID int64) (int64, error) {
	if s.cfg.IDs == nil {
		return 0, fmt.Errorf("%w: no Config.IDs", ErrConfig)
	}
	return s.cfg.IDs.Next(s.routeCode(s.rt.Load(), userID))
}

// On returns a session pinned to the named shard: its statements run on
// that shard, and db.Transaction / Begin on it start a transaction there.
// An unknown name yields a session whose statements fail.
func (s *Sharding) On(db *gorm.DB, name string) *gorm.DB {
	tx := db.Session(&gorm.Session{Context: db.Statement.Context})
	sh := s.byName[name]
	if sh == nil {
		tx.AddError(fmt.Errorf("%w: %q", ErrUnknownShard, name))
		return tx
	}
	tx.Statement.ConnPool = sh.pool
	return tx
}

// ForUser returns a session pinned to userID's shard (see On): the way to
// run a transaction over one user's rows.
func (s *Sharding) ForUser(db *gorm.DB, userID int64) *gorm.DB {
	return s.On(db, s.ShardOf(userID))
}

// ResolveOrders returns the shard of each order ID: decoded from minted IDs,
// otherwise through the lookup. IDs it cannot place are absent.
func (s *Sharding) ResolveOrders(ctx context.Context, ids []int64) (map[int64]string, error) {
	idx, err := s.resolveIDs(ctx, placer{rt: s.rt.Load()}, ids)
	out := make(map[int64]string, len(idx))
	for id, i := range idx {
		out[id] = s.shards[i].name
	}
	return out, err
}

// resolveIDs places order IDs with pl: minted IDs by their route code,
// the others through the lookup.
func (s *Sharding) resolveIDs(ctx context.Context, pl placer, ids []int64) (map[int64]int, error) {
	out := make(map[int64]int, len(ids))
	var rest []int64
	for _, id := range ids {
		if i, ok := pl.minted(id); ok {
			out[id] = i
		} else {
			rest = append(rest, id)
		}
	}
	if len(rest) == 0 || s.cfg.Lookup == nil {
		return out, nil
	}
	users, err := s.cfg.Lookup.Resolve(ctx, rest)
	for id, u := range users {
		out[id] = pl.key(u)
	}
	return out, err
}
