// Package reshardload is the workload the resharding tests and the
// resharding demo run while buckets move between shards: writers that
// create, update and delete orders (with an order item in the same
// transaction) for users only they write, readers that check every read
// against what the writers had acknowledged before it began, and a final
// check that every acknowledged row is on exactly the shard the map names,
// once, with its last acknowledged version, and that nothing else is.
//
// Each worker owns a set of users (no other worker writes them), so its
// own log of acknowledged writes is the truth for those users: a read that
// misses an acknowledged row, returns an older version, or returns a
// deleted row is an anomaly. A write whose outcome is unknown (the
// connection failed during COMMIT) makes its order "uncertain" until the
// next acknowledged write of it; the checks accept either outcome for it.
package reshardload
