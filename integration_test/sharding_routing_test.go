package integration_test

import (
	"errors"
	"testing"

	"github.com/freshread/freshread/sharding"
)

// Orders for many users land on the shard the algorithm names, checked on
// each shard's primary directly.
func TestShardingCreatePlacesRowsByUser(t *testing.T) {
	e := newShEnv(t, withIDs(fixedIDs(t, 1)))
	var batch []ShOrder
	for u := int64(1); u <= 200; u++ {
		batch = append(batch, ShOrder{UserID: u * 7, Status: "new", Amount: int(u)})
	}
	// One batch spanning every shard, then single rows.
	if err := e.db.Create(&batch).Error; err != nil {
		t.Fatal(err)
	}
	for u := int64(201); u <= 240; u++ {
		o := ShOrder{UserID: u * 7, Status: "new"}
		if err := e.db.Create(&o).Error; err != nil {
			t.Fatal(err)
		}
		if o.ID == 0 {
			t.Fatal("no ID minted")
		}
	}
	for i, o := range batch {
		if o.ID == 0 || !sharding.IsMinted(o.ID) {
			t.Fatalf("row %d: ID %d not minted / not copied back", i, o.ID)
		}
	}
	total := 0
	for _, name := range shardNames {
		rows := e.onShard(name)
		if len(rows) == 0 {
			t.Fatalf("shard %s got no rows", name)
		}
		for id, u := range rows {
			if want := e.s.ShardOf(u); want != name {
				t.Fatalf("order %d of user %d is on %s, want %s", id, u, name, want)
			}
		}
		total += len(rows)
	}
	if total != 240 {
		t.Fatalf("%d rows on the shards, want 240", total)
	}
}

func TestShardingQueryByUserHitsOneShard(t *testing.T) {
	e := newShEnv(t, withIDs(fixedIDs(t, 1)))
	for u := int64(1); u <= 40; u++ {
		if err := e.db.Create(&[]ShOrder{{UserID: u, Status: "a"}, {UserID: u, Status: "b"}}).Error; err != nil {
			t.Fatal(err)
		}
	}
	e.resetCounts()
	var got []ShOrder
	if err := e.db.Where("user_id = ?", 13).Find(&got).Error; err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].UserID != 13 {
		t.Fatalf("got %+v", got)
	}
	c := e.countsSnapshot()
	if len(c) != 1 || c[e.s.ShardOf(13)] != 1 {
		t.Fatalf("statements per shard %v, want one on %s", c, e.s.ShardOf(13))
	}
	// Map and struct conditions, Update and Delete by user.
	e.resetCounts()
	if err := e.db.Model(&ShOrder{}).Where(map[string]any{"user_id": 14}).Update("status", "paid").Error; err != nil {
		t.Fatal(err)
	}
	if err := e.db.Where(&ShOrder{UserID: 15}).Delete(&ShOrder{}).Error; err != nil {
		t.Fatal(err)
	}
	c = e.countsSnapshot()
	if c[e.s.ShardOf(14)] < 1 || c[e.s.ShardOf(15)] < 1 || sum(c) != 2 {
		t.Fatalf("statements per shard %v", c)
	}
	var paid int64
	e.direct[e.s.ShardOf(14)].Model(&ShOrder{}).Where("user_id = 14 AND status = 'paid'").Count(&paid)
	if paid != 2 {
		t.Fatalf("%d orders of user 14 paid, want 2", paid)
	}
	var left int64
	e.direct[e.s.ShardOf(15)].Model(&ShOrder{}).Where("user_id = 15").Count(&left)
	if left != 0 {
		t.Fatalf("user 15 still has %d orders", left)
	}
	// Count on one shard is fine (no merge needed).
	var n int64
	if err := e.db.Model(&ShOrder{}).Where("user_id = ?", 16).Count(&n).Error; err != nil || n != 2 {
		t.Fatalf("count = %d, %v", n, err)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// Order-ID queries reach exactly one shard: minted IDs decode to it.
func TestShardingOrderIDQueriesReachOneShard(t *testing.T) {
	e := newShEnv(t, withIDs(fixedIDs(t, 2)))
	var orders []ShOrder
	for u := int64(1); u <= 50; u++ {
		orders = append(orders, ShOrder{UserID: u * 31, Status: "new"})
	}
	if err := e.db.Create(&orders).Error; err != nil {
		t.Fatal(err)
	}
	for _, o := range orders[:20] {
		e.resetCounts()
		var got ShOrder
		if err := e.db.First(&got, o.ID).Error; err != nil {
			t.Fatalf("First(%d): %v", o.ID, err)
		}
		if got.UserID != o.UserID {
			t.Fatalf("order %d: user %d, want %d", o.ID, got.UserID, o.UserID)
		}
		c := e.countsSnapshot()
		if len(c) != 1 || c[e.s.ShardOf(o.UserID)] != 1 {
			t.Fatalf("order %d: statements per shard %v, want 1 on %s", o.ID, c, e.s.ShardOf(o.UserID))
		}
	}
	// Where("id = ?"), Model(&o).Update, Delete(&o): one shard each.
	o := orders[21]
	e.resetCounts()
	var got []ShOrder
	if err := e.db.Where("id = ?", o.ID).Find(&got).Error; err != nil || len(got) != 1 {
		t.Fatalf("by id: %v %v", got, err)
	}
	if err := e.db.Model(&o).Update("status", "shipped").Error; err != nil {
		t.Fatal(err)
	}
	if err := e.db.Delete(&orders[22]).Error; err != nil {
		t.Fatal(err)
	}
	c := e.countsSnapshot()
	if sum(c) != 3 {
		t.Fatalf("statements %v, want 3 single-shard statements", c)
	}
	if _, ok := e.onShard(e.s.ShardOf(orders[22].UserID))[orders[22].ID]; ok {
		t.Fatal("deleted order still there")
	}
}

// IN lists are split per shard, run concurrently and concatenated.
func TestShardingINSplit(t *testing.T) {
	e := newShEnv(t, withIDs(fixedIDs(t, 3)))
	users := []int64{3, 300, 600, 900, 301, 4}
	for _, u := range users {
		if err := e.db.Create(&ShOrder{UserID: u, Status: "x"}).Error; err != nil {
			t.Fatal(err)
		}
	}
	e.resetCounts()
	var got []ShOrder
	if err := e.db.Where("user_id IN ?", users).Find(&got).Error; err != nil {
		t.Fatal(err)
	}
	if len(got) != len(users) {
		t.Fatalf("got %d rows, want %d", len(got), len(users))
	}
	want := map[string]bool{}
	for _, u := range users {
		want[e.s.ShardOf(u)] = true
	}
	c := e.countsSnapshot()
	if len(c) != len(want) || sum(c) != len(want) {
		t.Fatalf("statements per shard %v, want one on each of %v", c, want)
	}
	// clause.IN from a map, and an IN of order IDs.
	var got2 []ShOrder
	if err := e.db.Where(map[string]any{"user_id": users[:3]}).Find(&got2).Error; err != nil || len(got2) != 3 {
		t.Fatalf("map IN: %d rows, %v", len(got2), err)
	}
	ids := []int64{got[0].ID, got[1].ID, got[2].ID}
	var got3 []ShOrder
	if err := e.db.Find(&got3, ids).Error; err != nil || len(got3) != 3 {
		t.Fatalf("IN of IDs: %d rows, %v", len(got3), err)
	}
	// OR across keys reaches both shards (union), never only the last.
	a, b := int64(3), int64(300)
	if e.s.ShardOf(a) == e.s.ShardOf(b) {
		t.Fatal("test users share a shard")
	}
	var got4 []ShOrder
	if err := e.db.Where("user_id = ? OR user_id = ?", a, b).Find(&got4).Error; err != nil || len(got4) != 2 {
		t.Fatalf("OR: %d rows, %v", len(got4), err)
	}
	var got5 []ShOrder
	if err := e.db.Where("user_id = ?", a).Or("user_id = ?", b).Find(&got5).Error; err != nil || len(got5) != 2 {
		t.Fatalf(".Or(): %d rows, %v", len(got5), err)
	}
	// A write with OR across shards updates both.
	if err := e.db.Model(&ShOrder{}).Where("user_id = ? OR user_id = ?", a, b).Update("status", "y").Error; err != nil {
		t.Fatal(err)
	}
	for _, u := range []int64{a, b} {
		var o ShOrder
		e.direct[e.s.ShardOf(u)].Where("user_id = ?", u).First(&o)
		if o.Status != "y" {
			t.Fatalf("user %d status %q", u, o.Status)
		}
	}
}

// Scatter reads return the union; scatter reads the merge cannot do fail
// clearly.
func TestShardingScatterReads(t *testing.T) {
	e := newShEnv(t, withIDs(fixedIDs(t, 4)))
	for u := int64(1); u <= 64; u++ {
		if err := e.db.Create(&ShOrder{UserID: u * 16, Status: "open", Amount: 1}).Error; err != nil {
			t.Fatal(err)
		}
	}
	e.resetCounts()
	var all []ShOrder
	if err := e.db.Where("status = ?", "open").Find(&all).Error; err != nil {
		t.Fatal(err)
	}
	if len(all) != 64 || len(all) != e.totalOrders() {
		t.Fatalf("scatter got %d rows, want 64", len(all))
	}
	if c := e.countsSnapshot(); len(c) != 4 {
		t.Fatalf("scatter reached %v", c)
	}
	// ORDER BY, LIMIT, First, Count and aggregates merge (see
	// sharding_merge_test.go); what cannot merge is refused.
	for _, bad := range []func() error{
		func() error { var x []ShOrder; return e.db.Order("2").Find(&x).Error }, // a position
		func() error {
			var x []struct{ S int }
			return e.db.Model(&ShOrder{}).Select("status, sum(amount) AS s").Group("status").Having("sum(amount) / count(*) > 1").Find(&x).Error // arithmetic in HAVING
		},
		func() error { var x []ShOrder; return e.db.Raw("SELECT * FROM orders ORDER BY id").Find(&x).Error },
	} {
		if err := bad(); !errors.Is(err, sharding.ErrScatterUnsupported) {
			t.Fatalf("scatter with ORDER BY/LIMIT/aggregate: err = %v, want ErrScatterUnsupported", err)
		}
	}
	// Raw scatter without those is fine.
	var raw []ShOrder
	if err := e.db.Raw("SELECT * FROM orders WHERE status = ?", "open").Find(&raw).Error; err != nil || len(raw) != 64 {
		t.Fatalf("raw scatter: %d rows, %v", len(raw), err)
	}
	// Unsharded tables stay on the default database.
	var p ShProduct
	if err := e.db.First(&p, 1).Error; err != nil || p.Name != "widget" {
		t.Fatalf("product: %+v %v", p, err)
	}
}

// A write without a shard key errors and writes nothing.
func TestShardingKeylessWriteRefused(t *testing.T) {
	e := newShEnv(t, withIDs(fixedIDs(t, 5)))
	for u := int64(1); u <= 8; u++ {
		e.db.Create(&ShOrder{UserID: u, Status: "open"})
	}
	e.resetCounts()
	cases := map[string]error{
		"update": e.db.Model(&ShOrder{}).Where("status = ?", "open").Update("status", "gone").Error,
		"delete": e.db.Where("status = ?", "open").Delete(&ShOrder{}).Error,
		"raw":    e.db.Exec("UPDATE orders SET status = 'gone'").Error,
		"create": e.db.Create(&ShOrder{Status: "no user"}).Error,
		"or":     e.db.Model(&ShOrder{}).Where("user_id = ? OR status = ?", 1, "open").Update("status", "gone").Error,
	}
	for name, err := range cases {
		if !errors.Is(err, sharding.ErrNoShardKey) {
			t.Fatalf("%s: err = %v, want ErrNoShardKey", name, err)
		}
	}
	if c := e.countsSnapshot(); sum(c) != 0 {
		t.Fatalf("refused writes reached the shards: %v", c)
	}
	for _, name := range shardNames {
		var n int64
		e.direct[name].Model(&ShOrder{}).Where("status <> 'open'").Count(&n)
		if n != 0 {
			t.Fatalf("shard %s: %d rows changed", name, n)
		}
	}
	if e.totalOrders() != 8 {
		t.Fatalf("%d orders, want 8", e.totalOrders())
	}
	// Raw writes with the key route fine.
	if err := e.db.Exec("UPDATE orders SET status = 'paid' WHERE user_id = ?", 3).Error; err != nil {
		t.Fatal(err)
	}
	var o ShOrder
	e.direct[e.s.ShardOf(3)].Where("user_id = 3").First(&o)
	if o.Status != "paid" {
		t.Fatalf("raw update by key: status %q", o.Status)
	}
}

// Raw SQL IN lists and = ANY($1) are split per shard like the GORM
// path's: each shard is asked only for the keys it owns, so a stray copy
// of a row on another shard (as while buckets move) is neither read nor
// written.
func TestShardingRawINSplit(t *testing.T) {
	e := newShEnv(t, withIDs(fixedIDs(t, 13)))
	users := []int64{3, 300, 600, 4} // s0, s1, s2, s0
	for _, u := range users {
		if err := e.db.Create(&ShOrder{UserID: u, Status: "x"}).Error; err != nil {
			t.Fatal(err)
		}
	}
	if err := e.direct["s1"].Create(&ShOrder{ID: 77, UserID: 3, Status: "x"}).Error; err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp() // the stray row is on s1's replicas too, where the reads go
	reads := map[string]func(*[]ShOrder) error{
		"IN ?": func(d *[]ShOrder) error {
			return e.db.Raw("SELECT * FROM orders WHERE user_id IN ? AND status = ?", users, "x").Find(d).Error
		},
		"IN (?, ?, ?, ?)": func(d *[]ShOrder) error {
			return e.db.Raw("SELECT * FROM orders WHERE status = 'x' AND user_id IN (?, ?, ?, ?)", users[0], users[1], users[2], users[3]).Find(d).Error
		},
		"IN literals": func(d *[]ShOrder) error {
			return e.db.Raw("SELECT * FROM orders WHERE user_id IN (3, 300, 600, 4)").Find(d).Error
		},
		"= ANY($1)": func(d *[]ShOrder) error {
			return e.db.Raw("SELECT * FROM orders WHERE user_id = ANY($1)", users).Find(d).Error
		},
		"Scan": func(d *[]ShOrder) error {
			return e.db.Raw("SELECT * FROM orders WHERE user_id = ANY(ARRAY[3, 300, 600, 4])").Scan(d).Error
		},
	}
	for name, read := range reads {
		e.resetCounts()
		var got []ShOrder
		if err := read(&got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != 4 {
			t.Fatalf("%s: %d rows %+v, want 4 (the stray copy left out)", name, len(got), got)
		}
		for _, o := range got {
			if o.ID == 77 {
				t.Fatalf("%s: read the stray copy on s1", name)
			}
		}
		if c := e.countsSnapshot(); c["s0"] != 1 || c["s1"] != 1 || c["s2"] != 1 || sum(c) != 3 {
			t.Fatalf("%s: statements per shard %v, want one on s0, s1, s2", name, c)
		}
	}
	res := e.db.Exec("UPDATE orders SET status = ? WHERE user_id IN ?", "y", users)
	if res.Error != nil || res.RowsAffected != 4 {
		t.Fatalf("raw UPDATE: %d rows, %v; want 4", res.RowsAffected, res.Error)
	}
	res = e.db.Exec("DELETE FROM orders WHERE status = 'y' AND user_id = ANY($1)", users[:2])
	if res.Error != nil || res.RowsAffected != 2 {
		t.Fatalf("raw DELETE: %d rows, %v; want 2", res.RowsAffected, res.Error)
	}
	var stray ShOrder
	if err := e.direct["s1"].First(&stray, 77).Error; err != nil || stray.Status != "x" {
		t.Fatalf("the stray copy was written: %+v %v", stray, err)
	}
	if n := e.totalOrders(); n != 3 { // 300's deleted with 3's; 600, 4 and the stray remain
		t.Fatalf("%d orders left, want 3", n)
	}
}
