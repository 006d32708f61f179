package integration_test

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"testing"

	"gorm.io/gorm"

	"github.com/freshread/freshread/sharding"
)

// TestShardingLookupStaleInTransaction: inside a transaction a statement
// routed by a stale cached pair runs on the shard the pair names, which
// does not hold the order; a transaction cannot be routed again, so the
// statement returns sharding.ErrStaleLookup instead of an empty answer or
// a write of 0 rows, and the cache is corrected: the transaction run
// again finds the order (or is refused when the order is on another shard
// than the transaction's).
func TestShardingLookupStaleInTransaction(t *testing.T) {
	e := newStaleEnv(t)
	const first, find, update, del = 9101, 9102, 9103, 9104
	e.stale(first, find, update, del)
	b := strconv.FormatInt(e.b, 10)

	// First, in a transaction begun on the default database: it binds to
	// a's shard, where the pair sends it.
	err := e.db.Transaction(func(tx *gorm.DB) error {
		var got ShOrder
		return tx.First(&got, first).Error
	})
	if !errors.Is(err, sharding.ErrStaleLookup) {
		t.Errorf("First by a stale-paired ID in a transaction: %v; want ErrStaleLookup", err)
	}
	if v := e.cached(first); v != b {
		t.Errorf("after the statement the cache names user %q for order %d, want %s", v, first, b)
	}
	err = e.db.Transaction(func(tx *gorm.DB) error {
		var got ShOrder
		if err := tx.First(&got, first).Error; err != nil {
			return err
		}
		if got.UserID != e.b {
			return fmt.Errorf("found %+v", got)
		}
		return nil
	})
	if err != nil {
		t.Errorf("the transaction run again: %v; want order %d of user %d", err, first, e.b)
	}

	// Find into a slice (no ErrRecordNotFound), in a transaction on a's
	// shard.
	err = e.s.ForUser(e.db, e.a).Transaction(func(tx *gorm.DB) error {
		var rows []ShOrder
		err := tx.Where("id = ?", find).Find(&rows).Error
		if err == nil {
			t.Errorf("Find by a stale-paired ID in a transaction: %d rows and no error", len(rows))
		}
		return err
	})
	if !errors.Is(err, sharding.ErrStaleLookup) {
		t.Errorf("Find by a stale-paired ID in a transaction: %v; want ErrStaleLookup", err)
	}
	err = e.s.ForUser(e.db, e.a).Transaction(func(tx *gorm.DB) error {
		var rows []ShOrder
		return tx.Where("id = ?", find).Find(&rows).Error
	})
	if !errors.Is(err, sharding.ErrCrossShard) {
		t.Errorf("the transaction on a's shard run again: %v; want ErrCrossShard (order %d is b's)", err, find)
	}

	// Writes: not a success of 0 rows.
	err = e.s.ForUser(e.db, e.a).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&ShOrder{}).Where("id = ?", update).Update("amount", 5)
		if res.Error == nil {
			t.Errorf("Update by a stale-paired ID in a transaction: %d rows and no error", res.RowsAffected)
		}
		return res.Error
	})
	if !errors.Is(err, sharding.ErrStaleLookup) {
		t.Errorf("Update by a stale-paired ID in a transaction: %v; want ErrStaleLookup", err)
	}
	if o, ok := e.stored(update); !ok || o.Amount != 1 {
		t.Errorf("order %d after the refused update: %+v (stored %v); want amount 1", update, o, ok)
	}
	err = e.db.Transaction(func(tx *gorm.DB) error {
		res := tx.Delete(&ShOrder{}, del)
		if res.Error == nil {
			t.Errorf("Delete by a stale-paired ID in a transaction: %d rows and no error", res.RowsAffected)
		}
		return res.Error
	})
	if !errors.Is(err, sharding.ErrStaleLookup) {
		t.Errorf("Delete by a stale-paired ID in a transaction: %v; want ErrStaleLookup", err)
	}
	if _, ok := e.stored(del); !ok || e.pairs(del) != 1 {
		t.Errorf("order %d after the refused delete: stored %v, %d lookup pairs; want stored, 1 pair", del, ok, e.pairs(del))
	}
	var rows int64
	err = e.db.Transaction(func(tx *gorm.DB) error {
		res := tx.Delete(&ShOrder{}, del)
		rows = res.RowsAffected
		return res.Error
	})
	if _, ok := e.stored(del); err != nil || rows != 1 || ok || e.pairs(del) != 0 {
		t.Errorf("the delete run again: %d rows, %v; order stored %v, %d lookup pairs; want 1 row, none left", rows, err, ok, e.pairs(del))
	}
}

// TestShardingLookupStaleInList: a statement by an IN list of order IDs,
// one of them paired stale in the cache, outside a transaction: the shard
// the stale pair names answers for the good ID alone (or the good ID's
// shard does, and the stale pair's finds nothing). The answer must hold
// every order: reads, a count, an update and a delete of the IN list
// reach both orders, each once, as stored on the shards.
func TestShardingLookupStaleInList(t *testing.T) {
	e := newStaleEnv(t)
	const readA, readB, count, update, del = 9201, 9202, 9203, 9204, 9205
	e.stale(readA, readB, count, update, del)
	// Orders whose pairs are right: goodA on a's shard (where the stale
	// pairs send their IDs), goodB on b's.
	const goodA, goodB = 9211, 9212
	if err := e.db.Create(&[]ShOrder{{ID: goodA, UserID: e.a, Status: "good", Amount: 1}, {ID: goodB, UserID: e.b, Status: "good", Amount: 1}}).Error; err != nil {
		t.Fatal(err)
	}

	for _, ids := range [][]int64{{goodA, readA}, {goodB, readB}} {
		var rows []ShOrder
		err := e.db.Where("id IN ?", ids).Order("id").Find(&rows).Error
		var want []ShOrder // ordered by ID, as the read
		for _, id := range ids {
			if o, ok := e.stored(id); ok {
				want = append(want, o)
			}
		}
		sort.Slice(want, func(i, j int) bool { return want[i].ID < want[j].ID })
		if err != nil || fmt.Sprint(rows) != fmt.Sprint(want) {
			t.Errorf("orders %v read by an IN list: %+v, %v; the shards hold %+v", ids, rows, err, want)
		}
	}

	var n int64
	if err := e.db.Model(&ShOrder{}).Where("id IN ?", []int64{goodA, count}).Count(&n).Error; err != nil || n != 2 {
		t.Errorf("orders %d, %d counted by an IN list: %d, %v; want 2", goodA, count, n, err)
	}

	res := e.db.Model(&ShOrder{}).Where("id IN ?", []int64{goodA, update}).Update("amount", gorm.Expr("amount + ?", 1))
	if res.Error != nil || res.RowsAffected != 2 {
		t.Errorf("orders %d, %d updated by an IN list: %d rows, %v; want 2", goodA, update, res.RowsAffected, res.Error)
	}
	for _, id := range []int64{goodA, update} {
		if o, ok := e.stored(id); !ok || o.Amount != 2 {
			t.Errorf("order %d after amount + 1: %+v (stored %v); want amount 2", id, o, ok)
		}
	}

	res = e.db.Delete(&ShOrder{}, []int64{goodB, del})
	if res.Error != nil || res.RowsAffected != 2 {
		t.Errorf("orders %d, %d deleted by an IN list: %d rows, %v; want 2", goodB, del, res.RowsAffected, res.Error)
	}
	for _, id := range []int64{goodB, del} {
		if _, ok := e.stored(id); ok || e.pairs(id) != 0 {
			t.Errorf("order %d after the delete: stored %v, %d lookup pairs; want neither", id, ok, e.pairs(id))
		}
	}
}
