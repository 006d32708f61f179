package integration_test

import (
	"testing"
)

// TestShardingSplitCreateFailureWritesNothing: a Create whose rows live on
// two shards, outside any transaction, inserts each shard's part on its
// own. When one part fails (here the shard's primary key refuses a
// duplicate ID), the statement returns the error and no row of it is
// left on any shard: the part another shard took is removed again. With
// the duplicate on either user (so the failing part is the first or the
// second one run). Before, the part run first stayed: the statement
// failed having written part of its rows (found by the MariaDB
// differential test, seed 1796530659907414730).
func TestShardingSplitCreateFailureWritesNothing(t *testing.T) {
	e := newShEnv(t)
	a, b, _, _ := keyChangeUsers(t, e)
	e.mustCreate(&ShOrder{ID: 9000, UserID: a, Status: "taken"}, &ShOrder{ID: 9100, UserID: b, Status: "taken"})
	for _, c := range []struct {
		name string
		rows []ShOrder
		new  int64
	}{
		{"duplicate on the second user's shard", []ShOrder{{ID: 9001, UserID: a, Status: "new"}, {ID: 9100, UserID: b, Status: "dup"}}, 9001},
		{"duplicate on the first user's shard", []ShOrder{{ID: 9000, UserID: a, Status: "dup"}, {ID: 9101, UserID: b, Status: "new"}}, 9101},
	} {
		rows := c.rows
		res := e.db.Create(&rows)
		if res.Error == nil {
			t.Fatalf("%s: the Create succeeded, want the duplicate-key error", c.name)
		}
		if res.RowsAffected != 0 {
			t.Errorf("%s: RowsAffected %d after a failure that wrote nothing, want 0", c.name, res.RowsAffected)
		}
		for shard, got := range e.shardRows() {
			for _, r := range got {
				if r.ID == c.new || r.Status == "dup" {
					t.Fatalf("%s: shard %s holds %+v after the failed Create (%v): a partial write", c.name, shard, r, res.Error)
				}
			}
		}
	}
}
