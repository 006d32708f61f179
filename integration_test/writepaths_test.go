package integration_test

import (
	"context"
	"errors"
	"strconv"

	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/lsnstore"
)

// writePath is one way a GORM application writes. write changes what read
// returns from "old" to want.
type writePath struct {
	name  string
	write func(db *gorm.DB, id uint) error
	read  func(e *env, db *gorm.DB, id uint) served
	want  string
	// untouched: a read of a table the write did not touch still goes to a
	// replica (false where the written tables cannot be known yet).
	untouched bool
	// old is what read returns before the write; default "old".
	old string
	// fresh: read looks at a row the write creates.
	fresh bool
}

func readItemName(e *env, db *gorm.DB, id uint) served { return e.readItem(db, id) }

// readItemCount returns the number of items with id as Name.
func readItemCount(e *env, db *gorm.DB, id uint) served {
	e.t.Helper()
	var s served
	if err := db.Model(&Item{}).Select("count(*) AS version, "+e.c.portExpr()+" AS port").
		Where("id = ?", id).Scan(&s).Error; err != nil {
		e.t.Fatal(err)
	}
	s.Name = strconv.Itoa(s.Version)
	return s
}

func readPart(e *env, db *gorm.DB, id uint) served {
	e.t.Helper()
	var s served
	if err := db.Model(&Part{}).Select("label AS name, 0 AS version, "+e.c.portExpr()+" AS port").
		Where("item_id = ?", id).Order("id DESC").Limit(1).Scan(&s).Error; err != nil {
		e.t.Fatal(err)
	}
	return s
}

func setName(db *gorm.DB, id uint) error {
	return db.Model(&Item{ID: id}).Updates(map[string]any{"name": "new", "version": 2}).Error
}

var writePaths = []writePath{
	{name: "Create", want: "new", untouched: true, fresh: true, read: func(e *env, db *gorm.DB, id uint) served { return e.readItem(db, id+1000) },
		write: func(db *gorm.DB, id uint) error { return db.Create(&Item{ID: id + 1000, Name: "new"}).Error }},
	{name: "CreateFromMapWithModel", want: "new", untouched: true, fresh: true, read: func(e *env, db *gorm.DB, id uint) served { return e.readItem(db, id+1000) },
		write: func(db *gorm.DB, id uint) error {
			return db.Model(&Item{}).Create(map[string]any{"id": id + 1000, "name": "new"}).Error
		}},
	{name: "Update", want: "new", untouched: true, read: readItemName, write: setName},
	{name: "GenericUpdates", want: "new", untouched: true, read: readItemName,
		write: func(db *gorm.DB, id uint) error {
			// A model holding a slice, passed by value: Dest and Model
			// are values that == cannot compare.
			_, err := gorm.G[Item](db).Where("id = ?", id).Updates(context.Background(), Item{Name: "new"})
			return err
		}},
	{name: "Save", want: "new", untouched: true, read: readItemName,
		write: func(db *gorm.DB, id uint) error { return db.Save(&Item{ID: id, Name: "new", Version: 2}).Error }},
	{name: "Delete", old: "1", want: "0", untouched: true, read: readItemCount,
		write: func(db *gorm.DB, id uint) error {
			if err := db.Where("item_id = ?", id).Delete(&Part{}).Error; err != nil {
				return err
			}
			return db.Delete(&Item{ID: id}).Error
		}},
	{name: "Transaction", want: "new", untouched: true, read: readItemName,
		write: func(db *gorm.DB, id uint) error {
			return db.Transaction(func(tx *gorm.DB) error { return setName(tx, id) })
		}},
	{name: "NestedTransactionSavepoint", want: "new", untouched: true, read: readItemName,
		write: func(db *gorm.DB, id uint) error {
			return db.Transaction(func(tx *gorm.DB) error {
				_ = tx.Transaction(func(tx2 *gorm.DB) error {
					tx2.Model(&Item{ID: id}).Update("name", "rolled-back")
					return errors.New("roll back to the savepoint")
				})
				return tx.Transaction(func(tx2 *gorm.DB) error { return setName(tx2, id) })
			})
		}},
	{name: "BeginCommit", want: "new", untouched: true, read: readItemName,
		write: func(db *gorm.DB, id uint) error {
			tx := db.Begin()
			if err := setName(tx, id); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit().Error
		}},
	{name: "SkipDefaultTransaction", want: "new", untouched: true, read: readItemName,
		write: func(db *gorm.DB, id uint) error {
			return setName(db.Session(&gorm.Session{SkipDefaultTransaction: true}), id)
		}},
	{name: "Exec", want: "new", untouched: true, read: readItemName,
		write: func(db *gorm.DB, id uint) error {
			return db.Exec("UPDATE items SET name = 'new' WHERE id = ?", id).Error
		}},
	{name: "RawReturningScan", want: "new", untouched: true, read: readItemName,
		write: func(db *gorm.DB, id uint) error {
			var it Item
			return db.Raw("UPDATE items SET name = 'new' WHERE id = ? RETURNING *", id).Scan(&it).Error
		}},
	{name: "ClauseReturning", want: "new", untouched: true, read: readItemName,
		write: func(db *gorm.DB, id uint) error {
			var it []Item
			return db.Model(&it).Clauses(clause.Returning{}).Where("id = ?", id).Update("name", "new").Error
		}},
	{name: "Association", want: "new", untouched: true, read: readPart,
		write: func(db *gorm.DB, id uint) error {
			return db.Model(&Item{ID: id}).Association("Parts").Append(&Part{Label: "new"})
		}},
	{name: "CreateWithAssociation", want: "new", untouched: true, read: readPart,
		write: func(db *gorm.DB, id uint) error {
			return db.Session(&gorm.Session{FullSaveAssociations: true}).Save(&Item{ID: id, Name: "old", Parts: []Part{{Label: "new"}}}).Error
		}},
	{name: "CreateInBatches", want: "new", untouched: true, fresh: true, read: func(e *env, db *gorm.DB, id uint) served { return e.readItem(db, id+1004) },
		write: func(db *gorm.DB, id uint) error {
			items := make([]Item, 5)
			for i := range items {
				items[i] = Item{ID: id + 1000 + uint(i), Name: "new"}
			}
			return db.CreateInBatches(items, 2).Error
		}},
}

// TestWritePathsNeverReadStale: for every write path, with replay paused
// on every replica, the next read of the written table returns the new data
// from the primary, a read of an untouched table is still served by a
// replica, and after resume the written table is read from a replica again.
func TestWritePathsNeverReadStale(t *testing.T) {
	for i, wp := range writePaths {
		t.Run(wp.name, func(t *testing.T) {
			runWritePath(t, newEnv(t), wp, uint(i+1))
		})
	}
}

// runWritePath runs one write path on e: write with replay paused, read
// fresh from the primary, untouched table from a replica, then resume.
func runWritePath(t *testing.T, e *env, wp writePath, id uint) {
	t.Helper()
	if err := e.db.Create(&Item{ID: id, Name: "old", Version: 1}).Error; err != nil {
		t.Fatal(err)
	}
	if err := e.db.Create(&Part{ItemID: id, Label: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	if !wp.fresh {
		e.waitReplicaServes(e.db) // the plugin sees the replicas (and a store it has verified)
		before := wp.read(e, e.db, id)
		if old := wp.old; before.Name != old && !(old == "" && before.Name == "old") {
			t.Fatalf("before the write: %+v", before)
		}
		e.mustReplica(before, "read before the write")
	}

	e.pauseAll()
	if err := wp.write(e.db, id); err != nil {
		t.Fatalf("write: %v", err)
	}
	got := wp.read(e, e.db, id)
	if got.Name != wp.want {
		t.Fatalf("STALE READ after %s with replay paused: got %q, want %q (port %d)", wp.name, got.Name, wp.want, got.Port)
	}
	e.mustPrimary(got, "read of the written table")
	if wp.untouched {
		o := e.readOther(e.db)
		if o.Name != "untouched" {
			t.Fatalf("untouched table: %+v", o)
		}
		e.mustReplica(o, "read of an untouched table")
	}

	e.resumeAll()
	again := wp.read(e, e.db, id)
	if again.Name != wp.want {
		t.Fatalf("after resume: got %q, want %q", again.Name, wp.want)
	}
	e.mustReplica(again, "read of the written table after catch-up")
}

// TestRollbackPublishesNothing: a rolled-back transaction leaves the
// table's write position where it was.
func TestRollbackPublishesNothing(t *testing.T) {
	e := newEnv(t)
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	before, err := e.store.WritePosition(e.ctx(), []string{"items"})
	if err != nil || before.IsZero() {
		t.Fatalf("position after create: %v, %v", before, err)
	}
	err = e.db.Transaction(func(tx *gorm.DB) error {
		if err := setName(tx, 1); err != nil {
			return err
		}
		return errors.New("abort")
	})
	if err == nil {
		t.Fatal("transaction did not fail")
	}
	after, err := e.store.WritePosition(e.ctx(), []string{"items"})
	if err != nil || !after.Equal(before) {
		t.Fatalf("position after rollback: %v (err %v), want unchanged %v", after, err, before)
	}
	e.resumeAll()
	if got := e.readItem(e.db, 1); got.Name != "old" {
		t.Fatalf("after rollback: %+v", got)
	}
}

// TestPositionReadAfterCommit shows the published position is past the
// commit record: it is above the WAL insert position read inside the
// transaction as its very last statement, which is where a position read
// inside the transaction (an after-create callback) would come from, and
// which a replica can replay without seeing the transaction.
func TestPositionReadAfterCommit(t *testing.T) {
	e := newEnv(t)
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	var inside string
	err := e.db.Transaction(func(tx *gorm.DB) error {
		if err := setName(tx, 1); err != nil {
			return err
		}
		return tx.Raw("SELECT pg_current_wal_insert_lsn()::text").Scan(&inside).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	in, err := lsnstore.ParseLSN(inside)
	if err != nil {
		t.Fatal(err)
	}
	published, err := e.store.WritePosition(e.ctx(), []string{"items"})
	if err != nil {
		t.Fatal(err)
	}
	if published.Main() <= in || published.HasLanes() {
		t.Fatalf("published %v is not past the last position inside the transaction %v: it was read before COMMIT", published, in)
	}
}

// TestWritePathsWithPrepareStmt: with gorm.Config.PrepareStmt the primary
// pool is GORM's prepared-statement cache; transactions still publish
// after COMMIT.
func TestWritePathsWithPrepareStmt(t *testing.T) {
	for i, wp := range writePaths {
		switch wp.name {
		case "Update", "Transaction", "NestedTransactionSavepoint", "BeginCommit", "SkipDefaultTransaction", "Exec", "Create":
		default:
			continue
		}
		t.Run(wp.name, func(t *testing.T) {
			runWritePath(t, newEnv(t, withPrepareStmt()), wp, uint(i+1))
		})
	}
}
