package sharding

import (
	"context"
	"database/sql"
	"fmt"

	"gorm.io/gorm"
)

// shardPool is the connection pool of a session pinned to a shard (see
// Sharding.On). Transactions begun on it are shardTx values, which tell
// the router which shard the transaction lives on.
type shardPool struct {
	gorm.ConnPool // the shard's own pool (the freshread primary pool when installed)
	sh            *shard
}

var _ gorm.ConnPoolBeginner = (*shardPool)(nil)

func (p *shardPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	var (
		inner gorm.ConnPool
		err   error
	)
	switch b := p.ConnPool.(type) {
	case gorm.ConnPoolBeginner:
		inner, err = b.BeginTx(ctx, opts)
	case gorm.TxBeginner:
		inner, err = b.BeginTx(ctx, opts)
	default:
		return nil, fmt.Errorf("sharding: shard %q: pool %T cannot begin a transaction", p.sh.name, p.ConnPool)
	}
	if err != nil {
		return nil, err
	}
	return &shardTx{ConnPool: inner, sh: p.sh}, nil
}

func (p *shardPool) GetDBConn() (*sql.DB, error) { return p.sh.sqlDB() }

// shardTx is a transaction on one shard. Statements of the transaction run
// on its inner transaction (the shard's own transaction type, so the
// shard's freshread plugin sees its own transaction and publishes after
// COMMIT).
type shardTx struct {
	gorm.ConnPool // the inner transaction
	sh            *shard
}

var _ gorm.TxCommitter = (*shardTx)(nil)

func (t *shardTx) Commit() error {
	c, ok := t.ConnPool.(gorm.TxCommitter)
	if !ok {
		return gorm.ErrInvalidTransaction
	}
	return c.Commit()
}

func (t *shardTx) Rollback() error {
	c, ok := t.ConnPool.(gorm.TxCommitter)
	if !ok {
		return gorm.ErrInvalidTransaction
	}
	return c.Rollback()
}

func (t *shardTx) GetDBConn() (*sql.DB, error) { return t.sh.sqlDB() }
