package sharding

import (
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

const hintKey = "sharding:shard"

// ShardHint pins a statement to a shard: db.Clauses(sharding.Shard("s2")).
// The hint wins over the statement's keys (admin work); inside a
// transaction it must name the transaction's shard.
type ShardHint struct{ Name string }

// Shard returns a hint that pins a statement to the named shard.
func Shard(name string) ShardHint { return ShardHint{Name: name} }

// ModifyStatement implements gorm.StatementModifier.
func (h ShardHint) ModifyStatement(stmt *gorm.Statement) { stmt.Settings.Store(hintKey, h.Name) }

// Build implements clause.Expression; the hint adds no SQL.
func (h ShardHint) Build(clause.Builder) {}
