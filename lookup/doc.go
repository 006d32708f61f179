// Package lookup keeps the order ID -> user ID map that routes a query by
// order ID to its shard when the ID does not carry its shard (IDs minted
// before sharding.IDGenerator existed).
//
// The map is the table order_lookup(order_id bigint primary key, user_id
// bigint) in a lookup database (PostgreSQL, MariaDB or MySQL), with a
// read-through Redis cache:
//
//   - Put (called by the sharding plugin before it inserts the orders)
//     records the rows (a row already recorded for the same user is kept;
//     one recorded for another user refuses the whole call with
//     sharding.ErrIDInUse), then caches them. An order never exists without its
//     lookup row. The sharding plugin deletes the rows again when the
//     insert fails or its transaction rolls back, and deletes the rows of
//     deleted orders only once their transaction commits.
//   - Resolve reads the cache with one MGET for the whole ID list, then the
//     table for the misses (one query), and fills the cache: found IDs for
//     TTL, unknown IDs for the much shorter NegativeTTL so an order created
//     just after a miss is not hidden for long.
//   - Delete (called after the orders are deleted) removes rows and cache
//     entries.
//   - Redis errors never fail a call: the table answers, and Stats counts
//     them. After Config.BreakerFailures consecutive failures a circuit
//     breaker skips Redis until a probe (after 100 ms doubling to 5 s)
//     succeeds.
//
// Backfill builds or repairs the table from the shards in keyset chunks
// (id > last ORDER BY id LIMIT n), recording its position per shard in
// order_lookup_backfill so an interrupted run resumes where it stopped;
// `freshread lookup backfill` runs it from the command line.
package lookup
