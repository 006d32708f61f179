package sharding_test

import (
	"cmp"
	"errors"
	"slices"

	"gorm.io/gorm"

	"github.com/freshread/freshread/sharding"
)

// A statement of several parts (a set operation, CTEs, a join, a
// subquery) runs whole on one shard when every sharded part names users
// of that shard; a UNION ALL of plain parts runs on each shard its parts
// name, the rows concatenated; any other statement whose parts reach
// several shards is refused before anything runs, and is split into one
// statement per user.
func Example_severalParts() {
	type Order struct {
		ID     int64 `gorm:"primaryKey;autoIncrement:false"`
		UserID int64 `gorm:"index"`
		Total  int64
	}
	var db *gorm.DB // with the sharding plugin installed
	var a, b int64  // two users
	var both []Order
	err := db.Raw("SELECT * FROM orders WHERE user_id = ? UNION ALL SELECT * FROM orders WHERE user_id = ? ORDER BY id", a, b).Scan(&both).Error
	if errors.Is(err, sharding.ErrCrossShard) {
		// a and b live on different shards: one statement per user.
		both = nil
		for _, u := range []int64{a, b} {
			var mine []Order
			if err := db.Where("user_id = ?", u).Find(&mine).Error; err != nil {
				panic(err)
			}
			both = append(both, mine...)
		}
		slices.SortFunc(both, func(x, y Order) int { return cmp.Compare(x.ID, y.ID) })
	}
}
