// Package reshard moves buckets between PostgreSQL or MariaDB shards
// online: the copy, the catch-up with the writes made meanwhile, the
// verification, the switch (a short write hold, the map published, every
// process routing to the new owner before it takes writes), and the
// cleanup. On PostgreSQL (14 or later) the catch-up is logical decoding
// with the built-in test_decoding plugin and the guard PL/pgSQL
// triggers; on MariaDB (10.11) the catch-up reads the binlog (row format,
// GTIDs) from Shard.BinlogDSN and the guard is triggers that SIGNAL
// SQLSTATE 'FRB01'. The shards' database/sql driver says which: pgx is
// PostgreSQL, go-sql-driver/mysql MariaDB; one Config is of one kind. A
// mover on MariaDB imports github.com/freshread/freshread/reshard/mariadb
// for its side effect (the binlog reader and the MySQL driver's support;
// without it New refuses MariaDB shards, naming the import); a mover on
// PostgreSQL links none of it.
// Below, the PostgreSQL words; docs/design/sharding-and-moves.md,
// "MariaDB (in progress)", has what differs there.
//
//	m, _ := reshard.New(reshard.Config{
//		Shards: []reshard.Shard{{Name: "s0", DB: s0}, {Name: "s4", DB: s4, RecordWrite: s4Plugin.RecordWrite}, ...},
//		Tables: []reshard.Table{{Name: "orders", Key: "user_id"}, {Name: "order_items", Key: "user_id"}},
//		Store:  mapStore, // sharding.MapStore, shared with every process
//	}, reshard.Move{Buckets: buckets, From: "s0", To: "s4"})
//	rep, err := m.Run(ctx)     // Prepare, Copy, CatchUp, Switch; run again to resume
//	_, err = m.Cleanup(ctx)    // later: delete the moved rows from s0
//
// # Phases
//
// Prepare installs, on every shard, the guard: a table
// freshread_bucket_fence(bucket, state, move_id) and on every sharded table
// a BEFORE INSERT OR UPDATE OR DELETE row trigger that raises SQLSTATE
// FRB01 (sharding.GuardSQLState) when the row's bucket, old or new, is
// fenced on that shard, unless the session is the mover's (SET LOCAL
// freshread.mover = 'on'; when its role may, the mover's transactions are
// replication sessions, in which no ordinary trigger fires). It fences the
// moving buckets on the target as
// incoming (application writes there would be wrong until the switch),
// and creates a logical replication slot on the source before anything is
// copied.
//
// Copy reads the moving buckets' rows in keyset chunks (primary key
// order) and writes them to the target, each chunk in one transaction
// that also records its last key. Values cross as text (each type's output
// on the source, its input on the target, under one DateStyle, TimeZone,
// extra_float_digits and bytea_output), which is exact for numeric, json,
// arrays, bytea, timestamps and NULLs. A target row outside the moving
// buckets with the same primary key is ErrForeignRow, never overwritten.
//
// CatchUp reads the slot's changes, re-reads each changed row on the
// source and writes it to the target (or deletes it there when it is gone
// or left the moving buckets); the slot advances only after the target
// committed, so a crash replays the batch, which is harmless. The store's
// move status then says the target is caught up (sharding.AllowLag reads).
//
// Verify compares per table and bucket the row counts and a checksum.
//
// Switch fences the moving buckets on the source as moved, waits until
// every transaction open on the source at the fence has ended, applies the
// last changes, verifies (both sides are frozen), publishes the new map
// (compare-and-set on the version read), waits until every client of the
// store has acknowledged it or has been silent for longer than its lease,
// and unfences the target. The time from the fence to the unfence is the
// write hold (SwitchReport.Hold). A failure before the publish rolls the
// switch back; after it the move only goes forward.
//
// Cleanup deletes the moved rows from the source (the source's fence stays
// for good: a process with an old map gets FRB01 there, refreshes and
// retries on the new owner) and drops the slot. Rollback, before the
// publish, drops the slot, deletes the copies and unfences.
//
// A Plan switches several moves together (one fence, one publish, one
// wait, one unfence): the doubling of every shard, or a migration from an
// unsharded database, which is a shard owning every bucket
// (Config.InitialMap) with one move per target shard.
//
// The state of a move lives on its target (freshread_reshard_state,
// freshread_reshard_copy): what a resume must know exactly commits there
// in the same transactions as the rows. docs/design/sharding-and-moves.md has the whole
// procedure, what can fail and how to resume, and the measured figures.
package reshard
