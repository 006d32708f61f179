package sharding

import (
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

const hintKey = "sharding:shard"

// ShardHint pins a statement to a shard: db.Clauses(sharding.Shard("s2")).
// The hint wins over the statement's keys (admin work); inside a
// transaction it must name the transaction's shard.
type ShardHint struct {
	// Name is the shard's name.
	Name string
}

// Shard returns a hint that pins a statement to the named shard.
func Shard(name string) ShardHint { return ShardHint{Name: name} }

// ModifyStatement implements gorm.StatementModifier.
func (h ShardHint) ModifyStatement(stmt *gorm.Statement) { stmt.Settings.Store(hintKey, h.Name) }

// Build implements clause.Expression; the hint adds no SQL.
func (h ShardHint) Build(clause.Builder) {}

const lagKey = "sharding:allow-lag"

// LagHint lets a read use a shard a move is filling: see AllowLag.
type LagHint struct {
	// Max is the longest lag the read accepts.
	Max time.Duration
}

// AllowLag returns a hint for a read that accepts rows up to max old:
// db.Clauses(sharding.AllowLag(2*time.Second)).Find(&orders). A bucket in
// a move that is catching up (MoveCatchingUp) whose target last held every
// change of the source at most max ago (the move's CaughtUpAge plus the
// time since the map was loaded) is read on the move's target, on its
// primary, instead of its owner: the first stage of a migration, which
// moves the reads that tolerate a lag to the new shards before the
// writes. Writes, reads in a transaction or pinned to a shard, reads
// without keys (scatter) and reads without the hint always go to the
// owner.
func AllowLag(max time.Duration) LagHint { return LagHint{Max: max} }

// ModifyStatement implements gorm.StatementModifier.
func (h LagHint) ModifyStatement(stmt *gorm.Statement) { stmt.Settings.Store(lagKey, h.Max) }

// Build implements clause.Expression; the hint adds no SQL.
func (h LagHint) Build(clause.Builder) {}

// allowLag applies an AllowLag hint of the statement to tg's placer.
func (s *Sharding) allowLag(stmt *gorm.Statement, tg *target) {
	v, ok := stmt.Settings.Load(lagKey)
	if !ok {
		return
	}
	max, _ := v.(time.Duration)
	if max <= 0 {
		return
	}
	tg.pl.lag = tg.pl.rt.lagBuckets(max, monoNow())
	for _, si := range tg.pl.lag {
		tg.lagMask |= 1 << si
	}
}
