package integration_test

import (
	"testing"

	"github.com/freshread/freshread/plugin"
)

// keyed is the default (positions by key), named where a test is about it.
var keyed = withConfig(func(c *plugin.Config) { c.TablePositions = false })

// checkKeyedPositions: with positions by key and replay paused, a write of
// row 1 leaves reads of row 2 on the replicas (with row 2's data), while
// every read that can see row 1 (by key, IN, range, raw SQL) is fresh; a
// write that proves no key makes keyed reads of every row wait; a row
// created by key is read fresh.
func checkKeyedPositions(t *testing.T, newEnv func(*testing.T, ...envOpt) *env) {
	e := newEnv(t, keyed)
	for id := uint(1); id <= 3; id++ {
		if err := e.db.Create(&Item{ID: id, Name: "old", Version: 1}).Error; err != nil {
			t.Fatal(err)
		}
	}
	e.resumeAll()
	e.pauseAll()
	if err := setName(e.db, 1); err != nil {
		t.Fatal(err)
	}
	if got := e.readItem(e.db, 1); got.Name != "new" {
		t.Fatalf("STALE READ of row 1 by key after its write: %+v", got)
	}
	got := e.readItem(e.db, 2)
	if got.Name != "old" {
		t.Fatalf("row 2: %+v", got)
	}
	e.mustReplica(got, "read of row 2 after a write of row 1 (keyed)")

	var rows []Item
	if err := e.db.Where("id IN ?", []uint{1, 2}).Order("id").Find(&rows).Error; err != nil || len(rows) != 2 || rows[0].Name != "new" {
		t.Fatalf("STALE READ through id IN (1, 2): %+v, %v", rows, err)
	}
	if err := e.db.Where("id > ?", 0).Order("id").Find(&rows).Error; err != nil || len(rows) != 3 || rows[0].Name != "new" {
		t.Fatalf("STALE READ through a range: %+v, %v", rows, err)
	}
	var name string
	if err := e.db.Raw("SELECT name FROM items WHERE id = 1").Scan(&name).Error; err != nil || name != "new" {
		t.Fatalf("STALE READ through raw SQL: %q, %v", name, err)
	}
	var joined []string
	if err := e.db.Model(&Item{}).Select("items.name").Joins("LEFT JOIN parts ON parts.item_id = items.id").
		Where("items.id = ?", 1).Pluck("items.name", &joined).Error; err != nil || len(joined) != 1 || joined[0] != "new" {
		t.Fatalf("STALE READ through a join: %q, %v", joined, err)
	}
	var it Item
	if err := e.db.First(&it, 1).Error; err != nil || it.Name != "new" {
		t.Fatalf("STALE READ through First by key: %+v, %v", it, err)
	}

	// A write that proves no key: every keyed read of the table waits.
	if err := e.db.Model(&Item{}).Where("name = ?", "old").Update("version", 5).Error; err != nil {
		t.Fatal(err)
	}
	if got := e.readItem(e.db, 3); got.Version != 5 {
		t.Fatalf("STALE READ of row 3 after an UPDATE without a key: %+v", got)
	}
	// A row created by key.
	fresh := Item{ID: 100, Name: "created"}
	if err := e.db.Create(&fresh).Error; err != nil {
		t.Fatal(err)
	}
	if got := e.readItem(e.db, fresh.ID); got.Name != "created" {
		t.Fatalf("STALE READ of a created row %d: %+v", fresh.ID, got)
	}
	e.resumeAll()
	e.mustReplica(e.readItem(e.db, 1), "row 1 after catch-up")
}

func TestKeyedPositions(t *testing.T)        { checkKeyedPositions(t, newEnv) }
func TestMariaDBKeyedPositions(t *testing.T) { checkKeyedPositions(t, newMariaEnv) }

// TestKeyedWritePathsNeverReadStale runs every write path with keyed
// positions on: none may be read stale.
func TestKeyedWritePathsNeverReadStale(t *testing.T) {
	for i, wp := range writePaths {
		t.Run(wp.name, func(t *testing.T) {
			runWritePath(t, newEnv(t, keyed), wp, uint(i+1))
		})
	}
}

func TestMariaDBKeyedWritePathsNeverReadStale(t *testing.T) {
	for i, wp := range writePathsWithoutReturning() {
		t.Run(wp.name, func(t *testing.T) {
			runWritePath(t, newMariaEnv(t, keyed), wp, uint(i+1))
		})
	}
}

// TestKeyedCreateInBatchesPastTheCap: a CreateInBatches of 1,000 rows (one
// transaction, more keys than one raise carries) publishes the table's
// unkeyed position: its rows are never read stale, by key or otherwise.
func TestKeyedCreateInBatchesPastTheCap(t *testing.T) {
	e := newEnv(t, keyed)
	e.waitReplicaServes(e.db)
	e.pauseAll()
	rows := make([]Item, 1000)
	for i := range rows {
		rows[i] = Item{ID: uint(i + 1), Name: "batch"}
	}
	if err := e.db.CreateInBatches(rows, 100).Error; err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint{1, 500, 1000} {
		if got := e.readItem(e.db, id); got.Name != "batch" {
			t.Fatalf("STALE READ of row %d after a CreateInBatches: %+v", id, got)
		}
	}
	var n int64
	if err := e.db.Model(&Item{}).Where("id IN ?", []uint{1, 999, 1001}).Count(&n).Error; err != nil || n != 2 {
		t.Fatalf("STALE READ through IN after a CreateInBatches: %d rows, %v", n, err)
	}
	e.resumeAll()
}

// TestCreateFromMapWithModel: Model(&Item{}).Create of a map and of a
// slice of maps, the key left to the database (GORM's TestCreateFromMap),
// is published and read fresh by another process, replay paused; the rows
// are maps, not the model's structs, so no key is read from them (reading
// one as the struct panicked). Both engines.
func TestCreateFromMapWithModel(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) {
			e := newEngineEnv(t, engine)
			other, _ := e.open()
			e.resumeAll()
			e.waitReplicaServes(other)
			e.pauseAll()
			if err := e.db.Model(&Item{}).Create(map[string]any{"Name": "from a map", "Version": 3}).Error; err != nil {
				t.Fatal(err)
			}
			maps := []map[string]any{{"Name": "from maps", "Version": 4}, {"name": "from maps", "Version": 4}}
			if err := e.db.Model(&Item{}).Create(&maps).Error; err != nil {
				t.Fatal(err)
			}
			for name, n := range map[string]int{"from a map": 1, "from maps": 2} {
				var got []Item
				if err := other.Where("name = ?", name).Find(&got).Error; err != nil {
					t.Fatal(err)
				}
				if len(got) != n {
					t.Fatalf("STALE READ after Model(&Item{}).Create of %q: %+v", name, got)
				}
			}
		})
	}
}
