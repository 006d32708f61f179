package integration_test

import (
	"errors"
	"testing"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/sharding"
)

// TestShardingCreateGivenTakenID: a plain Create given an order ID that
// another user's order holds is refused before anything is written, so no
// ID ever lives on two shards. Through the lookup (an ID recorded for
// another user: ErrIDInUse, none of the statement's pairs written) and
// through a minted ID's route (minted for another user:
// ErrShardKeyChange, no round trip). The same user's retry is not
// refused by the lookup (the shard's own primary key refuses the
// duplicate).
func TestShardingCreateGivenTakenID(t *testing.T) {
	t.Run("lookup", func(t *testing.T) {
		pg := testcluster.PostgresFor(t)
		st, ldb, _ := newLookup(t, pg)
		e := newShEnv(t, withLookup(st))
		a, b, _, _ := keyChangeUsers(t, e)
		e.mustCreate(&ShOrder{ID: 7000, UserID: a, Status: "a"})
		err := e.db.Create(&[]ShOrder{{ID: 7001, UserID: b, Status: "b"}, {ID: 7000, UserID: b, Status: "b"}}).Error
		if !errors.Is(err, sharding.ErrIDInUse) {
			t.Fatalf("Create of order 7000 for another user: %v, want ErrIDInUse", err)
		}
		var pairs int64
		if err := ldb.Table("order_lookup").Where("order_id = 7001").Count(&pairs).Error; err != nil || pairs != 0 {
			t.Fatalf("the refused statement's other pair: %d (%v), want none written", pairs, err)
		}
		for shard, rows := range e.shardRows() {
			for _, r := range rows {
				if r.UserID == b {
					t.Fatalf("shard %s holds %+v after the refused Create", shard, r)
				}
			}
		}
		var got ShOrder
		if err := e.db.First(&got, 7000).Error; err != nil || got.UserID != a {
			t.Fatalf("order 7000 by ID: %+v, %v; want user %d's", got, err, a)
		}
		if err := e.db.Create(&ShOrder{ID: 7000, UserID: a, Status: "again"}).Error; err == nil || errors.Is(err, sharding.ErrIDInUse) {
			t.Fatalf("the same user's second Create of order 7000: %v, want the shard's duplicate-key error", err)
		}
	})
	t.Run("minted", func(t *testing.T) {
		e := newShEnv(t, withIDs(fixedIDs(t, 15)))
		a, b, c, twin := keyChangeUsers(t, e)
		o := ShOrder{UserID: a, Status: "a"}
		e.mustCreate(&o)
		for _, u := range []int64{b, c} {
			err := e.db.Create(&ShOrder{ID: o.ID, UserID: u, Status: "copy"}).Error
			if !errors.Is(err, sharding.ErrShardKeyChange) {
				t.Fatalf("Create of minted order %d for user %d: %v, want ErrShardKeyChange", o.ID, u, err)
			}
		}
		// The bucket twin shares a's route: allowed (the shard's key
		// refuses the duplicate row).
		if err := e.db.Create(&ShOrder{ID: o.ID, UserID: twin, Status: "twin"}).Error; err == nil || errors.Is(err, sharding.ErrShardKeyChange) {
			t.Fatalf("Create of minted order %d for a's bucket twin: %v, want the shard's duplicate-key error", o.ID, err)
		}
		n := 0
		for _, rows := range e.shardRows() {
			for _, r := range rows {
				if r.ID == o.ID {
					n++
				}
			}
		}
		if n != 1 {
			t.Fatalf("order %d is stored %d times, want once", o.ID, n)
		}
	})
}
