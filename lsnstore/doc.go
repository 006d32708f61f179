// Package lsnstore keeps the replication positions that decide whether a
// read may go to a replica: the write position of the last write to each
// table (on PostgreSQL pg_current_wal_insert_lsn after the write), and the
// replay position of each replica (pg_last_wal_replay_lsn). A read of some
// tables may go to a replica whose replay position covers WritePosition of
// those tables; otherwise it goes to the primary.
//
// A Position is a vector of lanes so that engines whose positions are not
// one number fit the same store and rule: a PostgreSQL LSN is a main lane
// only; MariaDB has a lane per GTID domain and MySQL one per GTID source.
// Covers, Merge and Min compare lane by lane.
//
// Two stores implement Store: Memory, for one process, and Redis, shared by
// every process of an application. The design follows the original one
// ("DB_NAME-TABLE_NAME-write_lsn" and "DB_NAME-replay_lsn" in Redis), with
// a hash tag around the database name, a database-wide maximum, a position
// for writes whose tables are unknown, and compare-and-raise updates.
//
// # Key layout
//
// With prefix P (RedisOptions.Prefix, "freshread:" by default) and database
// D (RedisOptions.Database), every key of one database carries the hash tag
// {D}, so all of them land in one Redis Cluster slot and one MGET or one
// script call can touch any of them:
//
//	P{D}-<table>-write_lsn          write position of a table
//	P{D}-write_lsn                  maximum write position of the database (raised by every Raise)
//	P{D}-write_lsn-unknown_tables   position of writes whose tables are unknown (included in every read)
//	P{D}-replay_lsn                 minimum replay position over the replicas of the latest publication
//	P{D}-replay_lsn-<replica>       replay position of one replica
//	P{D}-replicas                   hash replica -> replay position, of the latest publication
//	P{D}-format                     the formats and releases of the processes using the store (format.go)
//	P{D}-anchor                     the store's identity, checked by every read; expires with the earliest lease (continuity.go)
//	P{D}-leases                     sorted set of the writer leases, member -> end (lease.go)
//	P{D}-leases-lapsed              sorted set of the members removed for having lapsed, kept an hour (lease.go)
//	P{D}-ddl_gen                    schema generation: advanced by every schema change that can add a dependency between tables (schema.go)
//	P{D}-ddl_pending                sorted set of the schema changes under way (schema.go)
//
// Values are the text of a Position: the canonical text of a pg_lsn
// ("16/B374D848") for the main lane, then "+name=hi/lo" per named lane
// ("0/64+7=0/14"). Table and
// replica names are used verbatim; a table named "replay_lsn-x" would
// share its key with a replica named "x-write_lsn", so do not name them so.
// Raises and publications are one Lua script each that merges the stored
// and the new position lane by lane (the per-lane maximum, never a string
// comparison), so concurrent writers leave the merge of their positions; a
// stored value that cannot be parsed is overwritten. A read
// that finds such a value returns an error wrapping ErrBadPosition, which
// the caller should treat as "read from the primary".
//
// # Expiry
//
// Every key has a TTL (RedisOptions.TTL, 10 minutes by default), refreshed
// whenever it is raised or published, so the keys of tables that are no
// longer written disappear. A missing key reads as 0, "no recent write".
// That is correct only once every replica has replayed past the expired
// position: the TTL must be longer than the largest replica lag the
// application tolerates, and the caller must treat a replica that lags by
// more than the TTL (or whose replay position has not been published within
// the TTL) as unusable, sending its reads to the primary.
//
// # Timeouts
//
// Every Redis call is bounded by RedisOptions.Timeout (50ms by default),
// added to the caller's context. An unreachable server thus yields an error
// within the timeout, never a hang; go-redis honours the deadline on socket
// reads only when the client is built with ContextTimeoutEnabled.
//
// The Memory store has no TTL: it holds one position per table and replica,
// which bounds its size, and a position that stays is never wrong, only
// passed by every replica.
package lsnstore
