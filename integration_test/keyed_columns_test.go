package integration_test

import (
	"context"
	"fmt"
	"testing"

	"gorm.io/gorm"

	"github.com/freshread/freshread/plugin"
)

// keyedParts keys parts by item_id besides their primary key.
var keyedParts = withConfig(func(c *plugin.Config) {
	c.TablePositions = false
	c.KeyColumns = map[string][]string{"parts": {"item_id"}}
})

// partRow is a part read with the server that served it.
type partRow struct {
	ID     uint
	ItemID uint
	Label  string
	Port   int
}

// partsOf reads item's parts through GORM, pinned to item_id.
func (e *env) partsOf(db *gorm.DB, item uint) []partRow {
	e.t.Helper()
	var rows []partRow
	if err := db.Model(&Part{}).Select("id, item_id, label, "+e.c.portExpr()+" AS port").
		Where("item_id = ?", item).Order("id").Scan(&rows).Error; err != nil {
		e.t.Fatalf("read parts of item %d: %v", item, err)
	}
	return rows
}

// rawPartsOf reads item's parts through raw SQL pinned to item_id.
func (e *env) rawPartsOf(db *gorm.DB, item uint) []partRow {
	e.t.Helper()
	var rows []partRow
	if err := db.Raw("SELECT id, item_id, label, "+e.c.portExpr()+" AS port FROM parts WHERE item_id = ? ORDER BY id", item).
		Scan(&rows).Error; err != nil {
		e.t.Fatalf("raw read of parts of item %d: %v", item, err)
	}
	return rows
}

// part reads one part by primary key.
func (e *env) part(db *gorm.DB, id uint) partRow {
	e.t.Helper()
	var rows []partRow
	if err := db.Model(&Part{}).Select("id, item_id, label, "+e.c.portExpr()+" AS port").
		Where("id = ?", id).Scan(&rows).Error; err != nil || len(rows) != 1 {
		e.t.Fatalf("read part %d: %v, %v", id, rows, err)
	}
	return rows[0]
}

// seedItems creates items 1 to n named name through e.db.
func (e *env) seedItems(name string, n uint) {
	e.t.Helper()
	for id := uint(1); id <= n; id++ {
		if err := e.db.Create(&Item{ID: id, Name: name}).Error; err != nil {
			e.t.Fatal(err)
		}
	}
}

// seedParts creates items 1 to items and parts 1 (item 1, "a"), 2 (item
// 2, "b") and 3 (item 2, "c") through e.db.
func (e *env) seedParts(items uint) {
	e.t.Helper()
	e.seedItems("item", items)
	for _, p := range []Part{{ID: 1, ItemID: 1, Label: "a"}, {ID: 2, ItemID: 2, Label: "b"}, {ID: 3, ItemID: 2, Label: "c"}} {
		if err := e.db.Create(&p).Error; err != nil {
			e.t.Fatal(err)
		}
	}
}

// step starts a step of a test: replay resumed until the replicas serve
// e.db and others, then paused again.
func (e *env) step(name string, others ...*gorm.DB) {
	e.t.Helper()
	e.t.Logf("step: %s", name)
	e.resumeAll()
	e.waitReplicaServes(e.db)
	for _, db := range others {
		e.waitReplicaServes(db)
	}
	e.pauseAll()
}

func labels(rows []partRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Label
	}
	return out
}

func (e *env) partsMustBe(rows []partRow, what string, want ...string) {
	e.t.Helper()
	got := labels(rows)
	if len(got) != len(want) {
		e.t.Fatalf("STALE READ? %s: labels %q, want %q", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			e.t.Fatalf("STALE READ %s: labels %q, want %q", what, got, want)
		}
	}
}

// onlyPartFresh checks that item's only part is part id, labelled label,
// read by item_id (GORM and raw SQL) and by primary key after a write.
func (e *env) onlyPartFresh(item, id uint, label, after string) {
	e.t.Helper()
	e.partsMustBe(e.partsOf(e.db, item), fmt.Sprintf("item %d's parts by item_id after %s", item, after), label)
	e.partsMustBe(e.rawPartsOf(e.db, item), fmt.Sprintf("item %d's parts by raw item_id after %s", item, after), label)
	if got := e.part(e.db, id); got.Label != label {
		e.t.Fatalf("STALE READ of part %d by primary key after %s: %+v", id, after, got)
	}
}

func (e *env) partsOnReplica(rows []partRow, what string) {
	e.t.Helper()
	if len(rows) == 0 {
		e.t.Fatalf("%s: no rows", what)
	}
	e.mustReplica(served{Port: rows[0].Port}, what)
}

// checkKeyedColumns: with parts keyed by item_id (Config.KeyColumns) and
// replay paused, a write pinned to one item_id leaves reads of another
// item's parts on the replicas and never lets a read of the written item
// (by item_id, by primary key, through raw SQL) be stale; a Create raises
// the new rows' item_id; an update by primary key makes reads by item_id
// wait; an update that moves rows to another item_id raises both values.
func checkKeyedColumns(t *testing.T, newEnv func(*testing.T, ...envOpt) *env) {
	e := newEnv(t, keyedParts)
	e.seedParts(6)
	step := func(name string) { e.step(name) }

	step("a write pinned to item_id")
	if err := e.db.Model(&Part{}).Where("item_id = ?", 1).Update("label", "a1").Error; err != nil {
		t.Fatal(err)
	}
	e.onlyPartFresh(1, 1, "a1", "a write by item_id")
	rows := e.partsOf(e.db, 2)
	e.partsMustBe(rows, "item 2's parts", "b", "c")
	e.partsOnReplica(rows, "item 2's parts after a write of item 1's (keyed by item_id)")
	rows = e.rawPartsOf(e.db, 2)
	e.partsMustBe(rows, "item 2's parts (raw)", "b", "c")
	e.partsOnReplica(rows, "item 2's parts through raw SQL after a write of item 1's")

	step("a Create")
	if err := e.db.Create(&Part{ID: 4, ItemID: 3, Label: "d"}).Error; err != nil {
		t.Fatal(err)
	}
	e.partsMustBe(e.partsOf(e.db, 3), "item 3's created part", "d")
	e.partsOnReplica(e.partsOf(e.db, 2), "item 2's parts after a Create for item 3")

	step("an update by primary key")
	if err := e.db.Model(&Part{ID: 2}).Update("label", "b2").Error; err != nil {
		t.Fatal(err)
	}
	e.partsMustBe(e.partsOf(e.db, 2), "item 2's parts after an update of part 2 by key", "b2", "c")
	e.partsMustBe(e.rawPartsOf(e.db, 2), "item 2's parts (raw) after an update of part 2 by key", "b2", "c")
	if got := e.part(e.db, 3); got.Label != "c" {
		t.Fatalf("part 3: %+v", got)
	} else {
		e.mustReplica(served{Port: got.Port}, "part 3 after an update of part 2 by key")
	}

	step("an update moving rows to another item_id")
	if err := e.db.Model(&Part{}).Where("item_id = ?", 3).Update("item_id", 4).Error; err != nil {
		t.Fatal(err)
	}
	e.partsMustBe(e.partsOf(e.db, 4), "item 4's parts after rows moved in", "d")
	e.partsMustBe(e.partsOf(e.db, 3), "item 3's parts after rows moved out")
	e.partsOnReplica(e.partsOf(e.db, 2), "item 2's parts after rows moved from item 3 to 4")

	step("raw SQL writes")
	if err := e.db.Exec("UPDATE parts SET label = ? WHERE item_id = ?", "b3", 2).Error; err != nil {
		t.Fatal(err)
	}
	e.partsMustBe(e.rawPartsOf(e.db, 2), "item 2's parts (raw) after a raw update by item_id", "b3", "b3")
	e.partsMustBe(e.partsOf(e.db, 2), "item 2's parts after a raw update by item_id", "b3", "b3")
	e.partsOnReplica(e.rawPartsOf(e.db, 1), "item 1's parts (raw) after a raw update of item 2's")
	if err := e.db.Exec("UPDATE parts SET item_id = 5 WHERE item_id = 4").Error; err != nil {
		t.Fatal(err)
	}
	e.partsMustBe(e.rawPartsOf(e.db, 5), "item 5's parts after a raw move", "d")
	e.partsOnReplica(e.rawPartsOf(e.db, 1), "item 1's parts after a raw move from item 4 to 5")
	if err := e.db.Exec("UPDATE parts SET item_id = item_id + 1 WHERE item_id = 5").Error; err != nil {
		t.Fatal(err)
	}
	e.partsMustBe(e.rawPartsOf(e.db, 6), "item 6's parts after a raw move to an expression", "d")

	step("a mass update without a key")
	if err := e.db.Exec("UPDATE parts SET label = 'z' WHERE label <> ''").Error; err != nil {
		t.Fatal(err)
	}
	e.partsMustBe(e.partsOf(e.db, 1), "item 1's parts after a mass update", "z")
	if got := e.part(e.db, 1); got.Label != "z" {
		t.Fatalf("STALE READ of part 1 by key after a mass update: %+v", got)
	}
	e.resumeAll()
}

func TestKeyedColumns(t *testing.T)        { checkKeyedColumns(t, newEnv) }
func TestMariaDBKeyedColumns(t *testing.T) { checkKeyedColumns(t, newMariaEnv) }

// checkKeyedRawSQL: raw SQL reads and writes by primary key use key
// positions (the key from the table's model or the catalog): a raw write of
// row 1 leaves raw reads of row 2 on the replicas and is never read
// stale through raw SQL or GORM.
func checkKeyedRawSQL(t *testing.T, newEnv func(*testing.T, ...envOpt) *env, param string) {
	e := newEnv(t, keyed)
	e.seedItems("old", 2)
	e.step("items 1 and 2 written and replicated")
	if err := e.db.Exec("UPDATE items SET name = ? WHERE id = ?", "new", 1).Error; err != nil {
		t.Fatal(err)
	}
	read := func(id uint) served {
		var s served
		if err := e.db.Raw("SELECT name, version, "+e.c.portExpr()+" AS port FROM items WHERE id = "+param, id).Scan(&s).Error; err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := read(1); got.Name != "new" {
		t.Fatalf("STALE READ of row 1 through raw SQL after a raw write: %+v", got)
	}
	if got := e.readItem(e.db, 1); got.Name != "new" {
		t.Fatalf("STALE READ of row 1 through GORM after a raw write: %+v", got)
	}
	got := read(2)
	if got.Name != "old" {
		t.Fatalf("row 2: %+v", got)
	}
	e.mustReplica(got, "raw read of row 2 after a raw write of row 1")
	// IN lists and a delete.
	if err := e.db.Exec("DELETE FROM items WHERE id IN (?)", []uint{2}).Error; err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := e.db.Raw("SELECT count(*) FROM items WHERE id IN (?, ?)", 1, 2).Scan(&n).Error; err != nil || n != 1 {
		t.Fatalf("STALE READ through a raw IN after a raw delete: %d rows, %v", n, err)
	}
	e.resumeAll()
}

func TestKeyedRawSQL(t *testing.T)        { checkKeyedRawSQL(t, newEnv, "?") }
func TestMariaDBKeyedRawSQL(t *testing.T) { checkKeyedRawSQL(t, newMariaEnv, "?") }

// TestKeyedReplaySession: inside a replay session (statements arrive as
// SQL text), a read of row 2 stays on the replica after a write of row 1
// elsewhere, and a read of row 1 moves the session to the primary.
func TestKeyedReplaySession(t *testing.T) {
	e := newEnv(t, keyed)
	e.seedItems("old", 2)
	e.step("items 1 and 2 written and replicated")
	if err := setName(e.db, 1); err != nil {
		t.Fatal(err)
	}
	err := e.plug.Session(context.Background(), e.db, func(tx *gorm.DB) error {
		var it Item
		if err := tx.First(&it, 2).Error; err != nil || it.Name != "old" {
			t.Fatalf("row 2 in a session: %+v, %v", it, err)
		}
		// The port in the same statement: a read of no table waits for
		// every write and would move the session.
		var s served
		if err := tx.Raw("SELECT name, version, inet_server_port() AS port FROM items WHERE id = ?", 2).Scan(&s).Error; err != nil {
			t.Fatal(err)
		}
		e.mustReplica(s, "a read of row 2 in a session after a write of row 1")
		var it1 Item
		if err := tx.First(&it1, 1).Error; err != nil || it1.Name != "new" {
			t.Fatalf("STALE READ of row 1 in a session: %+v, %v", it1, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
}
