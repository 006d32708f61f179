package callbacks

import (
	"errors"
	"fmt"

	"gorm.io/gorm"
)

// Names of the callbacks freshread registers.
const (
	Route   = "freshread:route"
	Primary = "freshread:write_on_primary"
	Mark    = "freshread:mark_write"
	MarkKey = "freshread:mark_write_keys"
	Publish = "freshread:publish_autocommit"
	Retry   = "freshread:retry_on_primary"
	Relearn = "freshread:relearn_after_ddl"

	ShardRoute  = "sharding:route"
	ShardFinish = "sharding:finish"
)

// Freshness is what the freshness plugin does at its points of GORM's
// chains (see the package documentation for where each runs).
type Freshness interface {
	// RouteRead chooses Statement.ConnPool for a Query or Row statement,
	// and records the write of raw SQL that writes.
	RouteRead(db *gorm.DB)
	// WriteOnPrimary puts a Create, Update, Delete or Exec on the primary
	// when its Statement.ConnPool is a replica's, inherited from a read
	// made on the same statement.
	WriteOnPrimary(db *gorm.DB)
	// MarkModelWrite records the table a Create, Update or Delete writes.
	MarkModelWrite(db *gorm.DB)
	// MarkModelKeys, once the statement has run, records which of the
	// table's keys it wrote, or that it proved none.
	MarkModelKeys(db *gorm.DB)
	// MarkRawWrite records the tables an Exec writes.
	MarkRawWrite(db *gorm.DB)
	// PublishAutocommit publishes what a statement outside a transaction
	// wrote, once it has run.
	PublishAutocommit(db *gorm.DB)
	// RetryOnPrimary runs a read that a replica failed again on the
	// primary.
	RetryOnPrimary(db *gorm.DB)
	// RelearnAfterDDL relearns the dependency graph after a schema change
	// that can add a dependency.
	RelearnAfterDDL(db *gorm.DB)
}

// RegisterFreshness installs f's callbacks on db.
func RegisterFreshness(db *gorm.DB, f Freshness) error {
	cb := db.Callback()
	regs := []error{
		cb.Query().Before("*").Register(Route, f.RouteRead),
		cb.Row().Before("*").Register(Route, f.RouteRead),
		cb.Query().After("gorm:after_query").Register(Publish, f.PublishAutocommit),
		cb.Query().After("gorm:query").Before("gorm:preload").Register(Retry, f.RetryOnPrimary),
		cb.Row().After("gorm:row").Register(Retry, f.RetryOnPrimary),
		cb.Row().After(Retry).Register(Publish, f.PublishAutocommit),

		// First, before gorm:begin_transaction (absent with
		// SkipDefaultTransaction) begins on the statement's pool.
		cb.Create().Before("*").Register(Primary, f.WriteOnPrimary),
		cb.Update().Before("*").Register(Primary, f.WriteOnPrimary),
		cb.Delete().Before("*").Register(Primary, f.WriteOnPrimary),
		cb.Raw().Before("*").Register(Primary, f.WriteOnPrimary),

		cb.Create().After("gorm:begin_transaction").Before("gorm:before_create").Register(Mark, f.MarkModelWrite),
		cb.Update().After("gorm:begin_transaction").Before("gorm:before_update").Register(Mark, f.MarkModelWrite),
		cb.Delete().After("gorm:begin_transaction").Before("gorm:before_delete").Register(Mark, f.MarkModelWrite),
		cb.Create().After("gorm:create").Before("gorm:commit_or_rollback_transaction").Register(MarkKey, f.MarkModelKeys),
		cb.Update().After("gorm:update").Before("gorm:commit_or_rollback_transaction").Register(MarkKey, f.MarkModelKeys),
		cb.Delete().After("gorm:delete").Before("gorm:commit_or_rollback_transaction").Register(MarkKey, f.MarkModelKeys),
		cb.Create().After("gorm:commit_or_rollback_transaction").Register(Publish, f.PublishAutocommit),
		cb.Update().After("gorm:commit_or_rollback_transaction").Register(Publish, f.PublishAutocommit),
		cb.Delete().After("gorm:commit_or_rollback_transaction").Register(Publish, f.PublishAutocommit),

		cb.Raw().Before("gorm:raw").Register(Mark, f.MarkRawWrite),
		cb.Raw().After("gorm:raw").Register(Publish, f.PublishAutocommit),
		cb.Raw().After(Publish).Register(Relearn, f.RelearnAfterDDL),
	}
	for _, err := range regs {
		if err != nil {
			return fmt.Errorf("callbacks: register the freshness callbacks: %w", err)
		}
	}
	return nil
}

// Chain names one of GORM's callback chains.
type Chain int

const (
	Create Chain = iota
	Query
	Row
	Update
	Delete
	Raw
)

var chainNames = [...]string{"create", "query", "row", "update", "delete", "raw"}

func (c Chain) String() string {
	if c < 0 || int(c) >= len(chainNames) {
		return fmt.Sprintf("Chain(%d)", int(c))
	}
	return chainNames[c]
}

// Chains are every chain, in the order of Chain's values.
var Chains = [...]Chain{Create, Query, Row, Update, Delete, Raw}

// Sharding is what the sharding plugin does on the router's chains.
type Sharding interface {
	// Route runs a statement of chain on its shard's *gorm.DB, or lets it
	// through when it touches no sharded table; after running it there it
	// sets db.Error to a marker so the rest of the router's chain skips.
	Route(chain Chain, db *gorm.DB)
	// Finish, last, replaces the marker with the shard's result.
	Finish(db *gorm.DB)
}

// RegisterSharding installs s's callbacks on db: Route first and Finish
// last on every chain.
func RegisterSharding(db *gorm.DB, s Sharding) error {
	for _, c := range Chains {
		route := func(db *gorm.DB) { s.Route(c, db) }
		if err := registerAround(db, c, route, s.Finish); err != nil {
			return fmt.Errorf("callbacks: register the sharding callbacks on %s: %w", c, err)
		}
	}
	return nil
}

// registerAround registers first as the first and last as the last
// callback of chain c (GORM's processor type is unexported: one case per
// chain).
func registerAround(db *gorm.DB, c Chain, first, last func(*gorm.DB)) error {
	cb := db.Callback()
	switch c {
	case Create:
		return errors.Join(cb.Create().Before("*").Register(ShardRoute, first), cb.Create().After("*").Register(ShardFinish, last))
	case Query:
		return errors.Join(cb.Query().Before("*").Register(ShardRoute, first), cb.Query().After("*").Register(ShardFinish, last))
	case Row:
		return errors.Join(cb.Row().Before("*").Register(ShardRoute, first), cb.Row().After("*").Register(ShardFinish, last))
	case Update:
		return errors.Join(cb.Update().Before("*").Register(ShardRoute, first), cb.Update().After("*").Register(ShardFinish, last))
	case Delete:
		return errors.Join(cb.Delete().Before("*").Register(ShardRoute, first), cb.Delete().After("*").Register(ShardFinish, last))
	default:
		return errors.Join(cb.Raw().Before("*").Register(ShardRoute, first), cb.Raw().After("*").Register(ShardFinish, last))
	}
}
