package integration_test

import (
	"errors"
	"fmt"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Writes that move a row to another primary key: with positions by key
// (the default) and replay paused, one write through the plugin moves
// item `from` to key `to`; the row must then be read at `to`, and be gone
// from `from`, through db.Table, raw SQL and the model, by the writing
// process and by a second one sharing the store. A write that moved the
// row but raised only the keys its WHERE names would be read stale at
// `to` (the replicas have no such row yet).

// keyMove is one write moving item from to key to.
type keyMove struct {
	name     string
	from, to uint
	maria    bool // MariaDB only: PostgreSQL refuses a qualified column in SET
	write    func(db *gorm.DB, from, to uint) *gorm.DB
}

// rekeyedItem is an item whose BeforeUpdate hook moves it to key To.
type rekeyedItem struct {
	ID   uint
	Name string
	To   uint `gorm:"-"`
}

func (rekeyedItem) TableName() string { return "items" }

func (it *rekeyedItem) BeforeUpdate(tx *gorm.DB) error {
	tx.Statement.SetColumn("id", it.To)
	return nil
}

var keyMoves = []keyMove{
	{name: "Select(*) writes the zero key", from: 11, to: 0, write: func(db *gorm.DB, from, _ uint) *gorm.DB {
		return db.Model(&Item{}).Where("id = ?", from).Select("*").Updates(Item{Name: "moved"})
	}},
	{name: "Select of the model's key writes zero", from: 12, to: 0, write: func(db *gorm.DB, from, _ uint) *gorm.DB {
		return db.Model(&Item{ID: from}).Select("id", "name").Updates(Item{Name: "moved"})
	}},
	{name: "clause.Set", from: 13, to: 113, write: func(db *gorm.DB, from, to uint) *gorm.DB {
		return db.Model(&Item{}).Where("id = ?", from).
			Clauses(clause.Set{{Column: clause.Column{Name: "id"}, Value: to}}).Update("name", "moved")
	}},
	{name: "clause.Assignments", from: 14, to: 114, write: func(db *gorm.DB, from, to uint) *gorm.DB {
		return db.Model(&Item{}).Where("id = ?", from).Clauses(clause.Assignments(map[string]any{"id": to})).Update("name", "moved")
	}},
	{name: "a struct with another key", from: 15, to: 115, write: func(db *gorm.DB, from, to uint) *gorm.DB {
		return db.Model(&Item{ID: from}).Updates(Item{ID: to, Name: "moved"})
	}},
	{name: "Save through a model of another key", from: 16, to: 116, write: func(db *gorm.DB, from, to uint) *gorm.DB {
		return db.Model(&Item{ID: from}).Save(&Item{ID: to, Name: "moved"})
	}},
	{name: "a BeforeUpdate hook setting the key", from: 18, to: 118, write: func(db *gorm.DB, from, to uint) *gorm.DB {
		return db.Model(&rekeyedItem{ID: from, To: to}).Updates(map[string]any{"name": "moved"})
	}},
	{name: "raw UPDATE through an alias", from: 17, to: 117, write: func(db *gorm.DB, from, to uint) *gorm.DB {
		return db.Exec("UPDATE items AS t SET id = ?, name = 'moved' WHERE t.id = ?", to, from)
	}},
	// MariaDB takes a table-qualified (or aliased) column in SET.
	{name: "Update of items.id", from: 21, to: 121, maria: true, write: func(db *gorm.DB, from, to uint) *gorm.DB {
		return db.Model(&Item{ID: from}).Update("items.id", to)
	}},
	{name: "Updates of items.id", from: 22, to: 122, maria: true, write: func(db *gorm.DB, from, to uint) *gorm.DB {
		return db.Model(&Item{ID: from}).Updates(map[string]any{"items.id": to, "name": "moved"})
	}},
	{name: "UpdateColumn of items.id", from: 23, to: 123, maria: true, write: func(db *gorm.DB, from, to uint) *gorm.DB {
		return db.Model(&Item{ID: from}).UpdateColumn("items.id", to)
	}},
	{name: "clause.Set of items.id", from: 24, to: 124, maria: true, write: func(db *gorm.DB, from, to uint) *gorm.DB {
		return db.Model(&Item{}).Where("id = ?", from).
			Clauses(clause.Set{{Column: clause.Column{Table: "items", Name: "id"}, Value: to}}).Update("name", "moved")
	}},
	{name: "Updates of items.id to an expression", from: 25, to: 125, maria: true, write: func(db *gorm.DB, from, _ uint) *gorm.DB {
		return db.Model(&Item{ID: from}).Updates(map[string]any{"items.id": gorm.Expr("id + 100")})
	}},
	{name: "db.Table Update of items.id", from: 26, to: 126, maria: true, write: func(db *gorm.DB, from, to uint) *gorm.DB {
		return db.Table("items").Where("id = ?", from).Update("items.id", to)
	}},
	{name: "db.Table Update through an alias", from: 27, to: 127, maria: true, write: func(db *gorm.DB, from, to uint) *gorm.DB {
		return db.Table("items t").Where("t.id = ?", from).Update("t.id", to)
	}},
	{name: "raw UPDATE of items.id", from: 28, to: 128, maria: true, write: func(db *gorm.DB, from, to uint) *gorm.DB {
		return db.Exec("UPDATE items SET items.id = ? WHERE id = ?", to, from)
	}},
	{name: "raw UPDATE of t.id", from: 29, to: 129, maria: true, write: func(db *gorm.DB, from, to uint) *gorm.DB {
		return db.Exec("UPDATE items t SET t.id = ? WHERE t.id = ?", to, from)
	}},
}

// checkKeyedMoves runs every keyMove of the engine, each one write with
// replay paused.
func checkKeyedMoves(t *testing.T, newEnv func(*testing.T, ...envOpt) *env, maria bool) {
	e := newEnv(t, keyed)
	other, _ := e.open(keyed)
	for _, m := range keyMoves {
		if m.maria && !maria {
			continue
		}
		if err := e.db.Delete(&Item{}, []uint{m.from, m.to}).Error; err != nil {
			t.Fatal(err)
		}
		if err := e.db.Create(&Item{ID: m.from, Name: "item " + fmt.Sprint(m.from)}).Error; err != nil {
			t.Fatal(err)
		}
		e.step(m.name, other)
		if err := m.write(e.db, m.from, m.to).Error; err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
		for who, db := range map[string]*gorm.DB{"the writer": e.db, "a second process": other} {
			after := fmt.Sprintf("%s (item %d moved to %d), read by %s", m.name, m.from, m.to, who)
			e.mustHaveItem(db, m.to, true, after)
			e.mustHaveItem(db, m.from, false, after)
		}
	}
	e.resumeAll()
}

// mustHaveItem reads item id through db.Table, raw SQL and the model,
// and fails unless each finds it (exists) or each does not.
func (e *env) mustHaveItem(db *gorm.DB, id uint, exists bool, after string) {
	e.t.Helper()
	var it Item
	err := db.First(&it, id).Error
	if err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
		e.t.Fatalf("First(%d): %v", id, err)
	}
	reads := map[string]bool{
		"db.Table":  e.tableItem(db, id).Name != "",
		"raw SQL":   e.rawItem(db, id).Name != "",
		"the model": err == nil,
	}
	for what, found := range reads {
		if found != exists {
			e.t.Fatalf("STALE READ of item %d through %s after %s: found %v, want %v", id, what, after, found, exists)
		}
	}
}

func TestKeyedMoves(t *testing.T)        { checkKeyedMoves(t, newEnv, false) }
func TestMariaDBKeyedMoves(t *testing.T) { checkKeyedMoves(t, newMariaEnv, true) }
