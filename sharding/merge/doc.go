// Package merge is the merge of the sharding plugin's multi-shard reads:
// a GORM read over several shards is planned (New: the per-shard
// statement rewritten, or a construct it cannot merge named), run on every
// shard concurrently and its rows merged (Run: ORDER BY with LIMIT and
// OFFSET, deep pages in two phases, DISTINCT, aggregates and GROUP BY,
// HAVING on the merged groups), then handed to GORM as if one database had
// answered. The sharding plugin reaches the shards through the Shards
// interface.
package merge
