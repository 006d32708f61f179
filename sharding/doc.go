// Package sharding splits large tables (orders, order items) across several
// databases by user ID, transparently to GORM code, as a GORM plugin:
//
//	s := sharding.New(sharding.Config{
//		Tables:    []sharding.Table{{Name: "orders", Key: "user_id", ID: "id", Lookup: true}},
//		Shards:    []sharding.ShardConfig{{Name: "s0", Dialector: postgres.Open(dsn0)}, ...},
//		Algorithm: sharding.EvenBuckets(1024, "s0", "s1", "s2", "s3"),
//	})
//	db.Use(s) // after the freshread plugin, if any
//
// A statement on a sharded table runs through the chosen shard's own
// *gorm.DB, so that shard's freshread plugin routes its reads to a fresh
// replica and publishes its writes. Statements carrying the user ID go to
// one shard; IN lists are split per shard and run concurrently; order IDs
// minted by the ID generator carry their bucket, others go through the
// lookup (package lookup); reads without a key are scattered to every shard
// and merged (ORDER BY, LIMIT/OFFSET, Count, SUM/MIN/MAX/AVG, GROUP BY,
// DISTINCT), and what cannot be merged correctly is refused with
// ErrScatterUnsupported. Writes without a key are refused (ErrNoShardKey)
// and write nothing; a transaction stays on one shard (ErrCrossShard);
// a write that may change a stored row's shard key is refused
// (ErrShardKeyChange): rows never move between shards.
//
// With Config.Map every process follows one shared, versioned bucket map
// (NewSQLMapStore keeps it in PostgreSQL): each statement routes with one
// immutable snapshot of it, a process that cannot refresh it for
// Config.MapLease refuses sharded statements (ErrMapStale), and a write a
// shard refuses because its bucket moved (ErrBucketMoved) is routed again
// with the refreshed map where that is safe. A read that reaches shards
// other than by its key (a scatter read) then reads only the rows each
// shard owns in that snapshot, so the copies a bucket move leaves on two
// shards are read once; raw SQL over several shards, which cannot be so
// restricted, is refused while a move is in progress.
//
// See docs/guide/sharding.md for the configuration and moves, and
// docs/design/sharding-and-moves.md for the ID layout and the limits.
package sharding
