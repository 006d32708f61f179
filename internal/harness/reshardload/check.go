package reshardload

import (
	"context"
	"fmt"
	"sort"

	"gorm.io/gorm"

	"github.com/freshread/freshread/sharding"
)

// Placement is what the final check found.
type Placement struct {
	// Rows is the number of order rows found over every shard.
	Rows int
	// Problems lists every row that is misplaced, duplicated, lost,
	// resurrected or at a version that was not the last acknowledged one.
	Problems []string
}

type foundRow struct {
	shard   string
	version int64
}

// CheckPlacement reads every order and item of every shard (plain
// connections to the shard primaries, by name) and compares them with the
// workers' logs and the map m: every row must be on the shard that owns
// its bucket (or its hot user's shard) and nowhere else, every acknowledged
// live order must be there with its last acknowledged version and its
// item, and no deleted or never-written order may exist. Rows of buckets
// that moved but were not cleaned up yet are skipped on the shards in
// notCleaned (shard name -> buckets still to clean).
func CheckPlacement(ctx context.Context, m sharding.BucketMap, shards map[string]*gorm.DB, logs []map[int64]*OrderState, notCleaned map[string][]int) (Placement, error) {
	var p Placement
	skip := map[string]map[int]bool{}
	for name, bs := range notCleaned {
		skip[name] = map[int]bool{}
		for _, b := range bs {
			skip[name][b] = true
		}
	}
	owner := func(user int64) string {
		if s, ok := m.HotUsers[user]; ok {
			return s
		}
		return m.Owners[int(uint64(user)%uint64(len(m.Owners)))]
	}
	orders := map[int64][]foundRow{}
	items := map[int64][]string{} // order id -> shards holding an item of it
	names := make([]string, 0, len(shards))
	for n := range shards {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		db := shards[name].WithContext(ctx)
		var os []Order
		if err := db.Find(&os).Error; err != nil {
			return p, fmt.Errorf("reshardload: read orders of %s: %w", name, err)
		}
		for _, o := range os {
			b := int(uint64(o.UserID) % uint64(len(m.Owners)))
			if skip[name][b] {
				continue
			}
			p.Rows++
			if owner(o.UserID) != name {
				p.Problems = append(p.Problems, fmt.Sprintf("order %d (user %d, bucket %d) on %s, owner %s", o.ID, o.UserID, b, name, owner(o.UserID)))
			}
			orders[o.ID] = append(orders[o.ID], foundRow{shard: name, version: o.Version})
		}
		var is []Item
		if err := db.Find(&is).Error; err != nil {
			return p, fmt.Errorf("reshardload: read items of %s: %w", name, err)
		}
		for _, it := range is {
			b := int(uint64(it.UserID) % uint64(len(m.Owners)))
			if skip[name][b] {
				continue
			}
			if owner(it.UserID) != name {
				p.Problems = append(p.Problems, fmt.Sprintf("item %d (user %d, bucket %d) on %s, owner %s", it.ID, it.UserID, b, name, owner(it.UserID)))
			}
			items[it.OrderID] = append(items[it.OrderID], name)
		}
	}
	known := map[int64]*OrderState{}
	for _, l := range logs {
		for id, st := range l {
			known[id] = st
		}
	}
	for id, rows := range orders {
		if len(rows) > 1 {
			p.Problems = append(p.Problems, fmt.Sprintf("order %d on %d shards: %v", id, len(rows), rows))
		}
		st := known[id]
		switch {
		case st == nil:
			p.Problems = append(p.Problems, fmt.Sprintf("order %d on %s was never written by a worker", id, rows[0].shard))
		case st.Uncertain:
		case st.Deleted:
			p.Problems = append(p.Problems, fmt.Sprintf("order %d deleted but on %s", id, rows[0].shard))
		case rows[0].version != st.Version:
			p.Problems = append(p.Problems, fmt.Sprintf("order %d on %s at version %d, acknowledged %d", id, rows[0].shard, rows[0].version, st.Version))
		}
	}
	for id, st := range known {
		if st.Uncertain || st.Deleted {
			continue
		}
		if len(orders[id]) == 0 {
			p.Problems = append(p.Problems, fmt.Sprintf("acknowledged order %d (user %d, version %d) lost", id, st.UserID, st.Version))
		}
		if len(items[id]) != 1 {
			p.Problems = append(p.Problems, fmt.Sprintf("item of acknowledged order %d found %d times (%v)", id, len(items[id]), items[id]))
		}
	}
	sort.Strings(p.Problems)
	return p, nil
}
