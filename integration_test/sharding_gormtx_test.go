package integration_test

import (
	"errors"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/sharding"
)

// GORM APIs that open a transaction of their own (CreateInBatches,
// Create with CreateBatchSize) and the application's db.Transaction on
// the default *gorm.DB, with sharded tables (docs/design/sharding-and-moves.md, "GORM's
// APIs").

// Users 1 and 2 are on s0, 300 on s1, 600 on s2, 900 on s3
// (EvenBuckets(1024) over four shards).
var spread = []int64{1, 2, 300, 301, 600, 900}

// statusOn counts the orders with status on each shard (read on the
// shards' primaries directly).
func (e *shEnv) statusOn(status string) map[string]int {
	e.t.Helper()
	out := map[string]int{}
	for _, name := range shardNames {
		var n int64
		if err := e.direct[name].Model(&ShOrder{}).Where("status = ?", status).Count(&n).Error; err != nil {
			e.t.Fatal(err)
		}
		if n > 0 {
			out[name] = int(n)
		}
	}
	return out
}

// placed checks that every order is stored on its user's shard, with the
// ID the caller's slice was given back.
func (e *shEnv) placed(orders []ShOrder) {
	e.t.Helper()
	on := map[string]map[int64]int64{}
	for _, name := range shardNames {
		on[name] = e.onShard(name)
	}
	for i, o := range orders {
		if o.ID == 0 {
			e.t.Fatalf("order %d: no ID given back", i)
		}
		if u, ok := on[e.s.ShardOf(o.UserID)][o.ID]; !ok || u != o.UserID {
			e.t.Fatalf("order %d (ID %d, user %d) is not on %s", i, o.ID, o.UserID, e.s.ShardOf(o.UserID))
		}
	}
}

func ordersFor(users []int64, n int, status string) []ShOrder {
	out := make([]ShOrder, n)
	for i := range out {
		out[i] = ShOrder{UserID: users[i%len(users)], Status: status, Amount: i}
	}
	return out
}

// CreateInBatches on one user's rows: GORM's transaction runs on the
// user's shard, so a failing batch rolls back the batches before it.
func TestShardingCreateInBatchesOneShard(t *testing.T) {
	e := newShEnv(t, withIDs(fixedIDs(t, 9)))
	a := int64(1)
	orders := ordersFor([]int64{a}, 60, "batch")
	if err := e.db.CreateInBatches(&orders, 25).Error; err != nil {
		t.Fatal(err)
	}
	e.placed(orders)
	if got := e.statusOn("batch"); got[e.s.ShardOf(a)] != 60 || len(got) != 1 {
		t.Fatalf("rows per shard %v, want 60 on %s", got, e.s.ShardOf(a))
	}
	// The third batch fails (a duplicate ID): nothing of the first two stays.
	dup := ordersFor([]int64{a}, 60, "dup")
	dup[55].ID = orders[0].ID
	if err := e.db.CreateInBatches(&dup, 25).Error; err == nil {
		t.Fatal("duplicate ID accepted")
	}
	if got := e.statusOn("dup"); len(got) != 0 {
		t.Fatalf("a failed CreateInBatches left rows %v", got)
	}
}

// CreateInBatches over several shards runs like Create: rows go to their
// shards, one transaction per shard, committed at the end; a failing
// batch rolls back every shard.
func TestShardingCreateInBatchesAcrossShards(t *testing.T) {
	e := newShEnv(t, withIDs(fixedIDs(t, 10)))
	orders := ordersFor(spread, 100, "spread")
	if err := e.db.CreateInBatches(&orders, 25).Error; err != nil {
		t.Fatal(err)
	}
	e.placed(orders)
	if got := e.statusOn("spread"); len(got) != 4 || got["s0"] != 34 || got["s1"] != 34 || got["s2"] != 16 || got["s3"] != 16 {
		t.Fatalf("rows per shard %v", got)
	}
	// The last batch fails: no shard keeps anything.
	dup := ordersFor(spread, 100, "dup")
	dup[96].ID = orders[0].ID // user 1, on s0, in the last batch
	if err := e.db.CreateInBatches(&dup, 25).Error; err == nil {
		t.Fatal("duplicate ID accepted")
	}
	if got := e.statusOn("dup"); len(got) != 0 {
		t.Fatalf("a failed CreateInBatches left rows %v", got)
	}
	// gorm.Config.CreateBatchSize makes Create call CreateInBatches.
	more := ordersFor(spread, 30, "sized")
	if err := e.db.Session(&gorm.Session{CreateBatchSize: 7}).Create(&more).Error; err != nil {
		t.Fatal(err)
	}
	e.placed(more)
	if e.totalOrders() != 130 {
		t.Fatalf("%d orders on the shards, want 130", e.totalOrders())
	}
	// Inside the application's own transaction, CreateInBatches stays on
	// one shard like any statement there.
	err := e.db.Transaction(func(tx *gorm.DB) error {
		rows := ordersFor(spread, 30, "inner")
		return tx.CreateInBatches(&rows, 10).Error
	})
	if !errors.Is(err, sharding.ErrCrossShard) {
		t.Fatalf("CreateInBatches over shards in db.Transaction: %v, want ErrCrossShard", err)
	}
	if got := e.statusOn("inner"); len(got) != 0 {
		t.Fatalf("refused CreateInBatches left rows %v", got)
	}
}

// db.Transaction on the default *gorm.DB binds to the database of its
// first statement: a user's shard, or the default database; any other
// database inside it is refused and nothing is committed.
func TestShardingDefaultTransaction(t *testing.T) {
	e := newShEnvFresh(t, withIDs(fixedIDs(t, 11)))
	a, b := int64(1), int64(300)
	shardA := e.s.ShardOf(a)
	err := e.db.Transaction(func(tx *gorm.DB) error {
		o := ShOrder{UserID: a, Status: "tx"}
		if err := tx.Create(&o).Error; err != nil {
			return err
		}
		if err := tx.Create(&ShItem{OrderID: o.ID, UserID: a, Sku: "k"}).Error; err != nil {
			return err
		}
		var n int64
		if err := tx.Model(&ShOrder{}).Where("user_id = ?", a).Count(&n).Error; err != nil || n != 1 {
			t.Errorf("count inside the transaction: %d %v", n, err)
		}
		return tx.Model(&o).Update("status", "tx2").Error
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.statusOn("tx2"); got[shardA] != 1 || len(got) != 1 {
		t.Fatalf("committed order: %v, want one on %s", got, shardA)
	}
	var items int64
	e.direct[shardA].Model(&ShItem{}).Where("user_id = ?", a).Count(&items)
	if items != 1 {
		t.Fatalf("%d items on %s, want 1", items, shardA)
	}

	// Begin / Commit by hand, and a rollback.
	tx := e.db.Begin()
	if err := tx.Create(&ShOrder{UserID: b, Status: "begun"}).Error; err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit().Error; err != nil {
		t.Fatal(err)
	}
	if got := e.statusOn("begun"); got[e.s.ShardOf(b)] != 1 || len(got) != 1 {
		t.Fatalf("Begin/Commit: %v", got)
	}
	err = e.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&ShOrder{UserID: a, Status: "gone"}).Error; err != nil {
			return err
		}
		return errors.New("roll back")
	})
	if err == nil || len(e.statusOn("gone")) != 0 {
		t.Fatalf("rollback: %v, rows %v", err, e.statusOn("gone"))
	}

	// A second shard, the default database after a shard, a shard after
	// the default database, a scatter read: ErrCrossShard, nothing kept.
	cases := map[string]func(tx *gorm.DB) error{
		"second shard": func(tx *gorm.DB) error {
			if err := tx.Create(&ShOrder{UserID: a, Status: "x"}).Error; err != nil {
				return err
			}
			return tx.Create(&ShOrder{UserID: b, Status: "x"}).Error
		},
		"default after shard": func(tx *gorm.DB) error {
			if err := tx.Create(&ShOrder{UserID: a, Status: "x"}).Error; err != nil {
				return err
			}
			return tx.Create(&ShProduct{ID: 2, Name: "x"}).Error
		},
		"shard after default": func(tx *gorm.DB) error {
			if err := tx.Create(&ShProduct{ID: 3, Name: "x"}).Error; err != nil {
				return err
			}
			return tx.Create(&ShOrder{UserID: a, Status: "x"}).Error
		},
		"batch over shards": func(tx *gorm.DB) error {
			rows := []ShOrder{{UserID: a, Status: "x"}, {UserID: b, Status: "x"}}
			return tx.Create(&rows).Error
		},
		"scatter read": func(tx *gorm.DB) error {
			var all []ShOrder
			return tx.Where("status = ?", "tx2").Find(&all).Error
		},
	}
	for name, fn := range cases {
		if err := e.db.Transaction(fn); !errors.Is(err, sharding.ErrCrossShard) {
			t.Fatalf("%s: %v, want ErrCrossShard", name, err)
		}
	}
	if got := e.statusOn("x"); len(got) != 0 {
		t.Fatalf("refused transactions left orders %v", got)
	}
	var products int64
	e.db.Model(&ShProduct{}).Where("id IN ?", []int{2, 3}).Count(&products)
	if products != 0 {
		t.Fatalf("refused transactions left %d products", products)
	}

	// Savepoints before the first statement are replayed on its shard.
	err = e.db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Transaction(func(tx2 *gorm.DB) error {
			return tx2.Create(&ShOrder{UserID: a, Status: "inner"}).Error
		}); err != nil {
			return err
		}
		_ = tx.Transaction(func(tx2 *gorm.DB) error {
			tx2.Create(&ShOrder{UserID: a, Status: "undone"})
			return errors.New("roll back the savepoint")
		})
		return tx.Create(&ShOrder{UserID: a, Status: "outer"}).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	if in, out, undone := e.statusOn("inner"), e.statusOn("outer"), e.statusOn("undone"); in[shardA] != 1 || out[shardA] != 1 || len(undone) != 0 {
		t.Fatalf("savepoints: inner %v outer %v undone %v", in, out, undone)
	}

	// A transaction on the default database alone is still the freshread
	// plugin's: its write is published at COMMIT, so a read with every
	// replica paused waits for it (the primary, "lagging").
	e.waitCaughtUp()
	e.pauseAll()
	if err := e.db.Transaction(func(tx *gorm.DB) error {
		return tx.Create(&ShProduct{ID: 4, Name: "fresh"}).Error
	}); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.decisions = nil
	e.mu.Unlock()
	var p ShProduct
	if err := e.db.First(&p, 4).Error; err != nil || p.Name != "fresh" {
		t.Fatalf("read after the default transaction: %+v %v", p, err)
	}
	e.mu.Lock()
	ds := e.decisions
	e.mu.Unlock()
	if len(ds) != 1 || ds[0].Target != plugin.Primary || ds[0].Reason != plugin.ReasonLagging {
		t.Fatalf("decisions %+v, want one: primary, lagging", ds)
	}
	e.resumeAll()
}

// FirstOrCreate and Save are statements of their own (GORM opens no
// transaction around them): each routes like Find, Create and Update.
func TestShardingFirstOrCreateAndSave(t *testing.T) {
	e := newShEnv(t, withIDs(fixedIDs(t, 12)))
	a, b := int64(1), int64(300)
	var o ShOrder
	if err := e.db.Where(ShOrder{UserID: a, Status: "foc"}).Attrs(ShOrder{Amount: 5}).FirstOrCreate(&o).Error; err != nil {
		t.Fatal(err)
	}
	var again ShOrder
	if err := e.db.Where(ShOrder{UserID: a, Status: "foc"}).FirstOrCreate(&again).Error; err != nil {
		t.Fatal(err)
	}
	if again.ID != o.ID || again.Amount != 5 {
		t.Fatalf("FirstOrCreate found %+v, created %+v", again, o)
	}
	e.placed([]ShOrder{o})
	if got := e.statusOn("foc"); len(got) != 1 || got[e.s.ShardOf(a)] != 1 {
		t.Fatalf("FirstOrCreate rows %v", got)
	}
	// Without a key it cannot create: refused before anything is written.
	if err := e.db.Where("status = ?", "nokey").FirstOrCreate(&ShOrder{}).Error; !errors.Is(err, sharding.ErrNoShardKey) {
		t.Fatalf("FirstOrCreate without a key: %v, want ErrNoShardKey", err)
	}

	s := ShOrder{UserID: b, Status: "save"}
	if err := e.db.Save(&s).Error; err != nil {
		t.Fatal(err)
	}
	s.Status = "saved"
	if err := e.db.Save(&s).Error; err != nil {
		t.Fatal(err)
	}
	if got := e.statusOn("saved"); len(got) != 1 || got[e.s.ShardOf(b)] != 1 {
		t.Fatalf("Save: %v", got)
	}
	batch := ordersFor(spread, 12, "saveall")
	if err := e.db.Save(&batch).Error; err != nil {
		t.Fatal(err)
	}
	e.placed(batch)
	for i := range batch {
		batch[i].Status = "resaved"
	}
	if err := e.db.Save(&batch).Error; err != nil { // ON CONFLICT DO UPDATE per shard
		t.Fatal(err)
	}
	if got := e.statusOn("resaved"); got["s0"] != 4 || got["s1"] != 4 || got["s2"] != 2 || got["s3"] != 2 {
		t.Fatalf("Save of a slice: %v", got)
	}
}

// ShOrderWithItems is an order saved with its items (has many);
// ShOrderWithProducts has an association on a table of the default
// database.
type ShOrderWithItems struct {
	ID     int64 `gorm:"primaryKey;autoIncrement:false"`
	UserID int64
	Status string
	Amount int
	Items  []ShItem `gorm:"foreignKey:OrderID"`
}

func (ShOrderWithItems) TableName() string { return "orders" }

type ShOrderWithProducts struct {
	ID       int64 `gorm:"primaryKey;autoIncrement:false"`
	UserID   int64
	Status   string
	Products []ShProduct `gorm:"foreignKey:ID"`
}

func (ShOrderWithProducts) TableName() string { return "orders" }

// Associations saved with a sharded row (Create, Save) run on the row's
// shard: allowed when their rows are on that shard, refused before
// anything is written otherwise.
func TestShardingAssociations(t *testing.T) {
	e := newShEnv(t, withIDs(fixedIDs(t, 14)))
	a, b := int64(1), int64(300)
	itemsOn := func(sku string) map[string]int {
		out := map[string]int{}
		for _, name := range shardNames {
			var n int64
			e.direct[name].Model(&ShItem{}).Where("sku = ?", sku).Count(&n)
			if n > 0 {
				out[name] = int(n)
			}
		}
		return out
	}
	o := ShOrderWithItems{UserID: a, Status: "assoc", Items: []ShItem{{UserID: a, Sku: "ok"}, {UserID: a, Sku: "ok"}}}
	if err := e.db.Create(&o).Error; err != nil {
		t.Fatal(err)
	}
	if got, items := e.statusOn("assoc"), itemsOn("ok"); got[e.s.ShardOf(a)] != 1 || items[e.s.ShardOf(a)] != 2 || len(items) != 1 {
		t.Fatalf("order %v items %v, want both on %s", got, items, e.s.ShardOf(a))
	}
	refused := map[string]struct {
		err error
		run func() error
	}{
		"item of another shard": {sharding.ErrCrossShard, func() error {
			return e.db.Create(&ShOrderWithItems{UserID: a, Status: "mixed", Items: []ShItem{{UserID: a, Sku: "m"}, {UserID: b, Sku: "m"}}}).Error
		}},
		"item without a key": {sharding.ErrNoShardKey, func() error {
			return e.db.Create(&ShOrderWithItems{UserID: a, Status: "mixed", Items: []ShItem{{Sku: "m"}}}).Error
		}},
		"table of the default database": {sharding.ErrCrossShard, func() error {
			return e.db.Create(&ShOrderWithProducts{UserID: a, Status: "mixed", Products: []ShProduct{{ID: 9, Name: "m"}}}).Error
		}},
		"Save with an item of another shard": {sharding.ErrCrossShard, func() error {
			o.Items = append(o.Items, ShItem{UserID: b, Sku: "m"})
			o.Status = "mixed"
			return e.db.Save(&o).Error
		}},
	}
	for name, c := range refused {
		if err := c.run(); !errors.Is(err, c.err) {
			t.Fatalf("%s: %v, want %v", name, err, c.err)
		}
	}
	if got, items := e.statusOn("mixed"), itemsOn("m"); len(got) != 0 || len(items) != 0 {
		t.Fatalf("refused statements wrote orders %v, items %v", got, items)
	}
	// Without its associations the row is written.
	if err := e.db.Omit(clause.Associations).Create(&ShOrderWithItems{UserID: a, Status: "omitted", Items: []ShItem{{UserID: b, Sku: "m"}}}).Error; err != nil {
		t.Fatal(err)
	}
	if got, items := e.statusOn("omitted"), itemsOn("m"); got[e.s.ShardOf(a)] != 1 || len(items) != 0 {
		t.Fatalf("Omit: orders %v, items %v", got, items)
	}
	// An item created alone, its model named in another model's has-many
	// (GORM lists that relation among the item's own): written on its
	// user's shard, without a panic.
	if err := e.db.Create(&ShItem{UserID: b, Sku: "alone"}).Error; err != nil {
		t.Fatal(err)
	}
	if items := itemsOn("alone"); items[e.s.ShardOf(b)] != 1 || len(items) != 1 {
		t.Fatalf("an item created alone: %v, want one on %s", items, e.s.ShardOf(b))
	}
}
