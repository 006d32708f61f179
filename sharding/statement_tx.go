package sharding

import (
	"context"
	"slices"

	"gorm.io/gorm"
)

// A write whose rows live on several shards, outside any transaction (a
// Create split over shards, an Update or Delete over several users), runs
// in a transaction on each shard it reaches: every shard's part runs,
// and only when all succeeded are the transactions committed, one after
// the other. A part that fails (a constraint, a shard down, the shard
// guard refusing a bucket in a move) rolls every part back: the
// statement fails having written nothing, and no other session ever saw
// a row of it. Only a failure between the commits, once one shard has
// committed, leaves part of it written; the error then names the shards
// that committed, and a Create's rows there are removed again
// (create_undo.go).
//
// A write on one shard, the common case, runs as it would without the
// plugin: no transaction is added.

// statementTx begins (lazily, on each shard as the statement reaches it)
// the transactions of one statement over several shards.
func (s *Sharding) statementTx(ctx context.Context) *lazyTx {
	if ctx == nil {
		ctx = context.Background()
	}
	return &lazyTx{s: s, ctx: ctx, batchOK: 1}
}

// endStatementTx commits the statement's transactions when it succeeded
// (err nil) and rolls them back otherwise. It returns the statement's
// outcome and leaves tg as a statement outside any transaction, with a
// Create's inserted rows those that stayed.
func (s *Sharding) endStatementTx(tg *target, stx *lazyTx, err error) error {
	tg.lazy, tg.many = nil, false
	if err != nil {
		_ = stx.Rollback()
		tg.rolledBack = true
		if tg.create != nil {
			tg.create.inserted = nil
		}
		return err
	}
	err = stx.Commit()
	if err != nil && tg.create != nil {
		kept := tg.create.inserted[:0]
		for _, i := range tg.create.inserted {
			if slices.Contains(stx.committed, tg.create.shardOf(i)) {
				kept = append(kept, i)
			}
		}
		tg.create.inserted = kept
	}
	return err
}

// lookupRecord is the lookup record of the transaction the statement's
// parts run in: its own over several shards, or the caller's; nil when
// each part commits by itself.
func (tg *target) lookupRecord(stmt *gorm.Statement) *txLookup {
	if tg.lazy != nil {
		return &tg.lazy.lookup
	}
	return txLookupOf(stmt)
}
