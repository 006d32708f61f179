package integration_test

import (
	"testing"

	"gorm.io/gorm"

	"github.com/freshread/freshread/plugin"
)

// Processes sharing a position store that key a table by different
// columns (their KeyColumns differ, or one runs a release without keys):
// the first to key the table records its columns in the store (its key
// signature), and a write by any of them is never read stale by another,
// with replay paused, whichever keyed the table first and through every
// read the reader keys.

// checkKeyedDisagreement: a process keying parts by item_id besides the
// primary key and one keying them by primary key only share the store;
// first names the one that writes the parts first (and so records its
// signature).
func checkKeyedDisagreement(t *testing.T, newEnv func(*testing.T, ...envOpt) *env, first string, redis bool) {
	var opts []envOpt
	if redis {
		s, _ := newRedisStore(t, t.Name())
		opts = append(opts, withStore(s))
	}
	byItem := keyedParts
	byID := keyed
	if first == "by-id" {
		byItem, byID = byID, byItem
	}
	// e.db is the first process; other the second.
	e := newEnv(t, append(opts, byItem)...)
	other, _ := e.open(byID)
	itemDB, idDB := e.db, other
	if first == "by-id" {
		itemDB, idDB = other, e.db
	}
	e.seedParts(2)
	step := func(name string) { e.step(name, other) }

	step("the process keying by primary key only updates part 2 by key")
	if err := idDB.Model(&Part{ID: 2}).Update("label", "b2").Error; err != nil {
		t.Fatal(err)
	}
	e.partsMustBe(e.partsOf(itemDB, 2), "item 2's parts, read by item_id by the other process", "b2", "c")
	e.partsMustBe(e.rawPartsOf(itemDB, 2), "item 2's parts, read by raw item_id by the other process", "b2", "c")
	if got := e.part(itemDB, 2); got.Label != "b2" {
		t.Fatalf("STALE READ of part 2 by key in the other process: %+v", got)
	}

	step("the process keying by item_id updates item 1's parts by item_id")
	if err := itemDB.Model(&Part{}).Where("item_id = ?", 1).Update("label", "a1").Error; err != nil {
		t.Fatal(err)
	}
	if got := e.part(idDB, 1); got.Label != "a1" {
		t.Fatalf("STALE READ of part 1 by key in the process keying by primary key: %+v", got)
	}
	var raw []partRow
	if err := idDB.Raw("SELECT id, item_id, label FROM parts WHERE id = ?", 1).Scan(&raw).Error; err != nil || len(raw) != 1 || raw[0].Label != "a1" {
		t.Fatalf("STALE READ of part 1 by raw key in the process keying by primary key: %+v, %v", raw, err)
	}
	e.partsMustBe(e.partsOf(idDB, 1), "item 1's parts read by item_id by the process keying by primary key", "a1")
	e.resumeAll()
}

func TestKeyedDisagreement(t *testing.T) {
	for _, first := range []string{"by-item", "by-id"} {
		for _, redis := range []bool{false, true} {
			name := first + "/memory"
			if redis {
				name = first + "/redis"
			}
			t.Run(name, func(t *testing.T) { checkKeyedDisagreement(t, newEnv, first, redis) })
		}
	}
}

func TestMariaDBKeyedDisagreement(t *testing.T) {
	for _, first := range []string{"by-item", "by-id"} {
		t.Run(first, func(t *testing.T) { checkKeyedDisagreement(t, newMariaEnv, first, true) })
	}
}

// checkWriterWithoutKeys: a process that keys nothing (TablePositions
// on, as every release before keys: it raises table positions only,
// through the store's plain Raise)
// writes row 1 while a process keying reads row 1 by key: never stale;
// a read of row 2 by key is not sent to the primary for a row it did not
// write only when the writer proved its keys, so it is not asserted.
func checkWriterWithoutKeys(t *testing.T, newEnv func(*testing.T, ...envOpt) *env) {
	s, _ := newRedisStore(t, t.Name())
	e := newEnv(t, withStore(s), keyed)
	plain, _ := e.open(withConfig(func(c *plugin.Config) { c.TablePositions = true }))
	e.seedItems("old", 2)
	e.step("items 1 and 2 written and replicated")
	for _, write := range []struct {
		name string
		do   func(*gorm.DB) error
	}{
		{"an update by key", func(db *gorm.DB) error { return setName(db, 1) }},
		{"a raw update by key", func(db *gorm.DB) error {
			return db.Exec("UPDATE items SET name = ?, version = 3 WHERE id = ?", "newer", 1).Error
		}},
	} {
		if err := write.do(plain); err != nil {
			t.Fatal(err)
		}
		var want string
		if err := plain.Raw("SELECT name FROM items WHERE id = 1").Scan(&want).Error; err != nil {
			t.Fatal(err)
		}
		if got := e.readItem(e.db, 1); got.Name != want {
			t.Fatalf("STALE READ of row 1 by key after %s by a process keying nothing: %+v, want %q", write.name, got, want)
		}
		var raw string
		if err := e.db.Raw("SELECT name FROM items WHERE id = ?", 1).Scan(&raw).Error; err != nil || raw != want {
			t.Fatalf("STALE READ of row 1 by raw key after %s by a process keying nothing: %q, %v", write.name, raw, err)
		}
	}
	e.resumeAll()
}

func TestKeyedReadsAfterWriterWithoutKeys(t *testing.T) { checkWriterWithoutKeys(t, newEnv) }
func TestMariaDBKeyedReadsAfterWriterWithoutKeys(t *testing.T) {
	checkWriterWithoutKeys(t, newMariaEnv)
}
