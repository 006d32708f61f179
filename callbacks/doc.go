// Package callbacks is where freshread meets GORM's callback chains: which
// callbacks the freshness plugin (package plugin) and the sharding plugin
// (package sharding) register, where each sits in each chain, and what it
// reads from and writes to the Statement. The plugins implement the small
// interfaces Freshness and Sharding; this package registers them.
//
// # The freshness plugin on one *gorm.DB
//
//	Query:  freshread:route ─ gorm:query ─ freshread:retry_on_primary ─ gorm:preload ─ gorm:after_query ─ freshread:publish_autocommit
//	Row:    freshread:route ─ gorm:row ─ freshread:retry_on_primary ─ freshread:publish_autocommit
//	Create: freshread:write_on_primary ─ gorm:begin_transaction ─ freshread:mark_write ─ gorm:before_create … gorm:create ─ freshread:mark_write_keys … gorm:commit_or_rollback_transaction ─ freshread:publish_autocommit
//	Update, Delete: as Create
//	Raw:    freshread:write_on_primary ─ freshread:mark_write ─ gorm:raw ─ freshread:publish_autocommit ─ freshread:relearn_after_ddl
//
// What each does to the Statement:
//
//   - route (first in Query and Row) sets Statement.ConnPool to a replica
//     or the primary; for raw SQL that writes it records the write.
//   - write_on_primary (first in Create, Update, Delete and Raw) sets
//     Statement.ConnPool back to the primary when the statement inherited
//     a replica's from a read (a chain reused after Find, or a Session
//     taken from it): GORM copies Statement.ConnPool into statements
//     derived from it, and only the read chains are routed.
//   - mark_write records the tables written on the transaction GORM just
//     began (Statement.ConnPool, a transaction whose Commit publishes), or,
//     outside one, in Statement.Settings for publish_autocommit.
//   - mark_write_keys, once the statement has run and before it commits,
//     records which keys of its table a keyed write touched (the rows a
//     Create inserted, the keys an Update's or Delete's WHERE pins), or
//     that it proved none (unless plugin.Config.TablePositions).
//   - retry_on_primary runs a read again on the primary when a replica
//     failed it (Statement.ConnPool back to the primary), and once more
//     on the primary when a connection of the primary failed it (another
//     process ended it).
//   - publish_autocommit (last) publishes what an autocommit statement
//     wrote, now that it has committed.
//   - relearn_after_ddl relearns the dependency graph after a schema change
//     that can add a dependency.
//
// # With sharding
//
// The sharding plugin is installed on the application's *gorm.DB (the
// router); every shard is a *gorm.DB of its own with its own freshness
// plugin. On the router, every chain is
//
//	sharding:route ─ (GORM's callbacks, skipped) ─ sharding:finish
//
// sharding:route runs the statement on its shard's *gorm.DB (that chain,
// above, with the shard's freshness callbacks: routing, marking,
// publishing happen there), then sets db.Error to a marker, so every GORM
// callback of the router's chain skips its work; sharding:finish, last,
// replaces the marker with the shard's result. A freshness plugin installed
// on the router too would see only statements for unsharded tables: for a
// sharded one its callbacks find db.Error set and return.
// TestOrderOnOneStatement pins these orders.
package callbacks
