// Package workload runs one mixed read/write workload against a primary
// and its delayed replicas (internal/harness/testcluster), once per routing
// strategy, and measures for each: the share of reads served by a replica,
// the stale reads, the read latency and the store round trips per read.
// internal/harness/workload/cmd/bench prints the results as a table.
//
// # Engines
//
// Options.Engine "postgres" (the default): a PostgreSQL primary with two
// streaming replicas, delayed with recovery_min_apply_delay (any delay in
// milliseconds). "mariadb": a MariaDB primary with one GTID replica
// (gorm.io/driver/mysql), delayed by a TCP relay in this process that
// holds the primary's binlog stream for the delay before passing it to the
// replica (any delay in milliseconds, with the local servers; the
// container and environment-variable providers keep MariaDB's
// MASTER_DELAY, whole seconds only; see testcluster.MariaDB.SetApplyDelay).
// Both engines use the same Redis store for the plugin strategies.
//
// # Workload
//
// Tables rows_0 … rows_<Tables-1> hold one row per user (id 1…Users) with a
// version number. Workers (Options.Workers goroutines) repeat, until the
// strategy's Duration ends: pick a user u and a table t at random; with
// probability 1-ReadFraction write, else read.
//
//   - A write increments the version of u's row in t and learns the
//     version it committed. PostgreSQL: UPDATE … SET version = version + 1
//     … RETURNING version, through GORM's Update, so in GORM's default
//     transaction. MariaDB (no RETURNING on UPDATE): a GORM transaction
//     running UPDATE … SET version = version + 1 then SELECT version,
//     @@port of the same row; the row lock makes the version the one this
//     transaction wrote, and the port must be the primary's. When the
//     write returns, the version is raised in a process-local map of the
//     highest acknowledged version per row.
//   - A read picks u's own row with probability OwnReads, else a random
//     user's row; it first loads the row's highest acknowledged version,
//     then reads `version, inet_server_port()` (MariaDB: `version, @@port`)
//     in one statement. A version below the one loaded is a stale read; the
//     port says which server answered.
//
// With Options.Rate > 0 operations start on a fixed schedule (Rate per
// second over all workers, the same for every strategy) until Duration
// ends; operations of a strategy that fell behind the schedule and were
// not started by then are dropped (its ops/s is below Rate). With Rate 0
// the workers run back to back.
//
// # Strategies
//
//   - always-primary: plain GORM on the primary.
//   - dbresolver: gorm.io/plugin/dbresolver, every read on a replica.
//   - window-2s: the common approach: for Options.Window after a user's
//     write returns, that user's reads go to the primary, else to any
//     replica: the plugin's Config.StickyWindow with Consistency Eventual
//     and a session per user.
//   - freshread-table: the plugin's per-table positions (Consistency
//     Table) in Redis.
//   - freshread-table+session: the same, each user's operations carrying
//     the user's plugin session (read-your-writes).
//   - freshread-table+wait: freshread-table with Config.MaxWait: a read no
//     replica can serve yet waits for one (PostgreSQL: for the plugin's
//     poller to see a fresh replica; MariaDB: MASTER_GTID_WAIT on the
//     replica), then goes to the primary on timeout.
//   - freshread-key: the plugin's default Config (freshread-table sets
//     Config.TablePositions), positions by key: a read of
//     a row waits only for the writes of that row (every statement names
//     the table's model, so the plugin knows the key; the SQL is the same
//     for every strategy).
//   - freshread-key+wait: freshread-key with Config.MaxWait.
//
// The three plugin strategies share the Redis store kind, so their writes
// publish alike; only the table strategies consult it on reads.
package workload
