// Package sqltext is the SQL tokenizer of the sharding plugin: the
// conditions it routes by (sharding's exprtext.go) and the multi-shard
// merge's ORDER BY and HAVING (sharding/merge) both read SQL text with it.
package sqltext
