package integration_test

import (
	"testing"

	"gorm.io/gorm"

	"github.com/freshread/freshread/sharding"
)

// TestShardingMultiShardWriteFailureWritesNothing: an Update or Delete
// over two users on different shards, outside any transaction, whose part
// on one shard fails returns the error and leaves every shard as it was:
// the part another shard ran is rolled back with it. With the failing row
// on either user (so that the failing part is the first or the second
// one run), through GORM and raw SQL. Before, the shards run before the
// failing one kept their part.
func TestShardingMultiShardWriteFailureWritesNothing(t *testing.T) {
	e := newShEnv(t)
	checkMultiShardWriteFailure(t, e.db, e.s, e.direct, e.names)
}

// TestMariaDBShardingMultiShardWriteFailureWritesNothing is the same on
// MariaDB shards.
func TestMariaDBShardingMultiShardWriteFailureWritesNothing(t *testing.T) {
	e := newDiffEnvMariaDB(t)
	checkMultiShardWriteFailure(t, e.db, e.s, e.direct, e.names)
}

// checkMultiShardWriteFailure makes one shard's part fail: an update divides
// by zero on one row only; a delete is refused by a foreign key from a
// table that only that shard has, referencing the row.
func checkMultiShardWriteFailure(t *testing.T, db *gorm.DB, s *sharding.Sharding, direct map[string]*gorm.DB, names []string) {
	a, b := int64(1), int64(0)
	for u := int64(2); b == 0; u++ {
		if s.ShardOf(u) != s.ShardOf(a) {
			b = u
		}
	}
	if err := db.Create(&[]ShOrder{{ID: 9200, UserID: a, Status: "a", Amount: 10}, {ID: 9300, UserID: b, Status: "b", Amount: 20}}).Error; err != nil {
		t.Fatal(err)
	}
	rowsNow := func() map[string][]ShOrder {
		out := map[string][]ShOrder{}
		for _, n := range names {
			var rows []ShOrder
			if err := direct[n].Order("id").Find(&rows).Error; err != nil {
				t.Fatal(err)
			}
			out[n] = rows
		}
		return out
	}
	before := rowsNow()
	users := []int64{a, b}
	for _, fail := range []struct {
		id    int64
		shard string
	}{{9200, s.ShardOf(a)}, {9300, s.ShardOf(b)}} {
		failID := fail.id
		hold := direct[fail.shard]
		if err := hold.Exec("CREATE TABLE order_holds (order_id bigint NOT NULL, FOREIGN KEY (order_id) REFERENCES orders (id))").Error; err != nil {
			t.Fatal(err)
		}
		if err := hold.Exec("INSERT INTO order_holds VALUES (?)", failID).Error; err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			run  func() *gorm.DB
		}{
			{"gorm update", func() *gorm.DB {
				return db.Model(&ShOrder{}).Where("user_id IN ?", users).
					Update("amount", gorm.Expr("amount + 1 + 1 / (id - ?)", failID))
			}},
			{"raw update", func() *gorm.DB {
				return db.Exec("UPDATE orders SET amount = amount + 1 + 1 / (id - ?) WHERE user_id IN (?, ?)", failID, a, b)
			}},
			{"gorm delete", func() *gorm.DB {
				return db.Where("user_id IN ?", users).Delete(&ShOrder{})
			}},
			{"raw delete", func() *gorm.DB {
				return db.Exec("DELETE FROM orders WHERE user_id IN (?, ?)", a, b)
			}},
		} {
			res := c.run()
			if res.Error == nil {
				t.Fatalf("%s failing on order %d: succeeded, want the shard's error", c.name, failID)
			}
			after := rowsNow()
			for shard, rows := range before {
				if len(after[shard]) != len(rows) {
					t.Fatalf("%s failing on order %d (%v): shard %s holds %+v, had %+v: a partial write", c.name, failID, res.Error, shard, after[shard], rows)
				}
				for i := range rows {
					if after[shard][i] != rows[i] {
						t.Fatalf("%s failing on order %d (%v): shard %s holds %+v, had %+v: a partial write", c.name, failID, res.Error, shard, after[shard][i], rows[i])
					}
				}
			}
		}
		if err := hold.Exec("DROP TABLE order_holds").Error; err != nil {
			t.Fatal(err)
		}
	}
	// The same statements failing nowhere write on both shards.
	if err := db.Model(&ShOrder{}).Where("user_id IN ?", users).Update("amount", gorm.Expr("amount + 1")).Error; err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, rows := range rowsNow() {
		for _, r := range rows {
			sum += r.Amount
		}
	}
	if sum != 32 {
		t.Fatalf("amounts sum to %d after the update of both users, want 32", sum)
	}
	if err := db.Where("user_id IN ?", users).Delete(&ShOrder{}).Error; err != nil {
		t.Fatal(err)
	}
	for shard, rows := range rowsNow() {
		if len(rows) != 0 {
			t.Fatalf("shard %s holds %+v after the delete of both users", shard, rows)
		}
	}
}
