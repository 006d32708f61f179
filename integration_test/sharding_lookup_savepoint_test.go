package integration_test

import (
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/sharding"
)

// TestShardingLookupFollowsSavepoints: a Delete of an order inside a
// transaction, rolled back to a savepoint (or in a nested transaction
// rolled back), keeps the order and so its lookup pair once the
// transaction commits; a Create of that ID for a user of another shard
// is then still refused (ErrIDInUse). Before the lookup record followed
// savepoints, the commit removed the pair of the order still stored, and
// the Create put a second order of that ID on another shard (found by the
// PostgreSQL differential test, seed 1796532652846118347).
func TestShardingLookupFollowsSavepoints(t *testing.T) {
	pg := testcluster.PostgresFor(t)
	st, ldb, _ := newLookup(t, pg)
	e := newShEnv(t, withLookup(st))
	a, b, _, _ := keyChangeUsers(t, e)
	for _, c := range []struct {
		name string
		id   int64
		del  func(tx *gorm.DB, id int64) error
	}{
		{"savepoint", 7300, func(tx *gorm.DB, id int64) error {
			if err := tx.SavePoint("sp1").Error; err != nil {
				return err
			}
			if err := tx.Delete(&ShOrder{}, id).Error; err != nil {
				return err
			}
			return tx.RollbackTo("sp1").Error
		}},
		{"nested transaction", 7301, func(tx *gorm.DB, id int64) error {
			err := tx.Transaction(func(tx2 *gorm.DB) error {
				if err := tx2.Delete(&ShOrder{}, id).Error; err != nil {
					return err
				}
				return errDiffRollback
			})
			if !errors.Is(err, errDiffRollback) {
				return err
			}
			return nil
		}},
	} {
		e.mustCreate(&ShOrder{ID: c.id, UserID: a, Status: "kept"})
		if err := e.s.ForUser(e.db, a).Transaction(func(tx *gorm.DB) error { return c.del(tx, c.id) }); err != nil {
			t.Fatalf("%s: the transaction: %v", c.name, err)
		}
		var pairs int64
		if err := ldb.Table("order_lookup").Where("order_id = ?", c.id).Count(&pairs).Error; err != nil || pairs != 1 {
			t.Fatalf("%s: order %d's lookup pair after its Delete was rolled back: %d (%v), want it kept", c.name, c.id, pairs, err)
		}
		err := e.db.Create(&ShOrder{ID: c.id, UserID: b, Status: "copy"}).Error
		if !errors.Is(err, sharding.ErrIDInUse) {
			t.Fatalf("%s: Create of stored order %d for a user of another shard: %v, want ErrIDInUse", c.name, c.id, err)
		}
	}
}
