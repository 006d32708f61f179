package sharding

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"
)

type staleOrder struct {
	ID     int64
	UserID int64
}

type staleOther struct{ ID int64 }

// answerIDs reads the order IDs a read returned only from destinations
// that hold the ID column in every row; the check of stale pairs then
// re-checks only the IDs the answer lacks, and every ID otherwise.
func TestAnswerIDs(t *testing.T) {
	sch, err := schema.Parse(&staleOrder{}, &sync.Map{}, schema.NamingStrategy{})
	if err != nil {
		t.Fatal(err)
	}
	var count int64
	cases := []struct {
		name string
		dest any
		want string // fmt of the IDs found, "map[]" for none known
	}{
		{"structs", &[]staleOrder{{ID: 3, UserID: 1}, {ID: 5, UserID: 2}}, "map[3:true 5:true]"},
		{"pointers to structs", &[]*staleOrder{{ID: 3}}, "map[3:true]"},
		{"one struct", &staleOrder{ID: 7}, "map[7:true]"},
		{"a struct without the ID selected", &[]staleOrder{{ID: 3}, {UserID: 2}}, "map[]"},
		{"another struct type", &[]staleOther{{ID: 3}}, "map[]"},
		{"maps", &[]map[string]any{{"id": int64(4)}, {"id": int64(6)}}, "map[4:true 6:true]"},
		{"a map without the ID", &[]map[string]any{{"user_id": int64(4)}}, "map[]"},
		{"a count", &count, "map[]"},
		{"plucked values", &[]int64{3, 5}, "map[]"},
	}
	for _, c := range cases {
		stmt := &gorm.Statement{Context: context.Background(), Schema: sch, Dest: c.dest}
		if got := fmt.Sprint(answerIDs(stmt, "id")); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// reached: inside a transaction only its shard; an IN list of IDs split
// per shard reached each ID's shard alone; otherwise every shard it ran on.
func TestReachedShards(t *testing.T) {
	tbl := &tableInfo{Table: Table{Name: "orders", Key: "user_id", ID: "id"}}
	ids := map[int64]int{1: 0, 2: 1}
	cases := []struct {
		name string
		tg   target
		id   int64
		si   int
		want bool
	}{
		{"transaction, its shard", target{tx: &shard{index: 1}, mask: 2}, 1, 1, true},
		{"transaction, another shard", target{tx: &shard{index: 1}, mask: 2}, 1, 0, false},
		{"split by ID, the ID's part", target{split: 0, splitCol: "id", mask: 3}, 2, 1, true},
		{"split by ID, another ID's part", target{split: 0, splitCol: "id", mask: 3}, 1, 1, false},
		{"split by key, a shard it ran on", target{split: 0, splitCol: "user_id", mask: 3}, 1, 1, true},
		{"one shard, another", target{split: -1, mask: 1}, 2, 1, false},
		{"no shard (contradictory keys)", target{split: -1}, 1, 0, false},
	}
	for _, c := range cases {
		tg := c.tg
		tg.t, tg.idShard = tbl, ids
		if got := tg.reached(c.id, c.si); got != c.want {
			t.Errorf("%s: reached(%d, %d) = %v, want %v", c.name, c.id, c.si, got, c.want)
		}
	}
}
