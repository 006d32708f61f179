package integration_test

import (
	"slices"
	"testing"

	"gorm.io/gorm"

	"github.com/freshread/freshread/plugin"
)

// inheritedWrite is a write made through a *gorm.DB whose statement was
// routed to a replica by a read: the chain itself, or a Session derived
// from it (GORM copies Statement.ConnPool into both).
type inheritedWrite struct {
	name  string
	write func(base *gorm.DB, id uint) error
	// want is item id's name after the write ("": no such item); before
	// it, item id is "old", or absent when created.
	want    string
	created bool
}

var inheritedWrites = []inheritedWrite{
	{name: "Session NewDB Create", want: "new", created: true, write: func(base *gorm.DB, id uint) error {
		return base.Session(&gorm.Session{NewDB: true}).Create(&Item{ID: id, Name: "new"}).Error
	}},
	{name: "chain Create", want: "new", created: true, write: func(base *gorm.DB, id uint) error {
		return base.Create(&Item{ID: id, Name: "new"}).Error
	}},
	{name: "Session Create without a default transaction", want: "new", created: true, write: func(base *gorm.DB, id uint) error {
		return base.Session(&gorm.Session{NewDB: true, SkipDefaultTransaction: true}).Create(&Item{ID: id, Name: "new"}).Error
	}},
	{name: "prepared Session Create", want: "new", created: true, write: func(base *gorm.DB, id uint) error {
		return base.Session(&gorm.Session{NewDB: true, PrepareStmt: true}).Create(&Item{ID: id, Name: "new"}).Error
	}},
	{name: "CreateInBatches", want: "new", created: true, write: func(base *gorm.DB, id uint) error {
		return base.Session(&gorm.Session{NewDB: true}).CreateInBatches([]Item{{ID: id, Name: "new"}, {ID: id + 1000, Name: "new"}}, 1).Error
	}},
	{name: "FirstOrCreate", want: "new", created: true, write: func(base *gorm.DB, id uint) error {
		var it Item
		return base.Session(&gorm.Session{NewDB: true}).Where(Item{ID: id}).Attrs(Item{Name: "new"}).FirstOrCreate(&it).Error
	}},
	{name: "Update", want: "new", write: func(base *gorm.DB, id uint) error {
		return base.Session(&gorm.Session{NewDB: true}).Model(&Item{}).Where("id = ?", id).Update("name", "new").Error
	}},
	{name: "Updates", want: "new", write: func(base *gorm.DB, id uint) error {
		return base.Session(&gorm.Session{NewDB: true}).Model(&Item{ID: id}).Updates(map[string]any{"name": "new"}).Error
	}},
	{name: "Save", want: "new", write: func(base *gorm.DB, id uint) error {
		return base.Session(&gorm.Session{NewDB: true}).Save(&Item{ID: id, Name: "new", Version: 1}).Error
	}},
	{name: "Delete", want: "", write: func(base *gorm.DB, id uint) error {
		return base.Session(&gorm.Session{NewDB: true}).Delete(&Item{}, id).Error
	}},
	{name: "Begin on the chain", want: "new", write: func(base *gorm.DB, id uint) error {
		tx := base.Begin()
		if tx.Error != nil {
			return tx.Error
		}
		defer tx.Rollback()
		if err := tx.Exec("UPDATE items SET name = 'new' WHERE id = ?", id).Error; err != nil {
			return err
		}
		return tx.Commit().Error
	}},
	{name: "Exec", want: "new", write: func(base *gorm.DB, id uint) error {
		return base.Exec("UPDATE items SET name = 'new' WHERE id = ?", id).Error
	}},
	{name: "Raw INSERT RETURNING Scan", want: "new", created: true, write: func(base *gorm.DB, id uint) error {
		var got uint
		return base.Raw("INSERT INTO items (id, name, version) VALUES (?, 'new', 1) RETURNING id", id).Scan(&got).Error
	}},
	{name: "Transaction", want: "new", write: func(base *gorm.DB, id uint) error {
		return base.Session(&gorm.Session{NewDB: true}).Transaction(func(tx *gorm.DB) error { return setName(tx, id) })
	}},
	{name: "Begin Commit", want: "new", write: func(base *gorm.DB, id uint) error {
		tx := base.Session(&gorm.Session{NewDB: true}).Begin()
		if tx.Error != nil {
			return tx.Error
		}
		if err := setName(tx, id); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit().Error
	}},
	{name: "Association Append", want: "old", write: func(base *gorm.DB, id uint) error {
		return base.Session(&gorm.Session{NewDB: true}).Model(&Item{ID: id}).Association("Parts").Append(&Part{Label: "new"})
	}},
}

// TestWritesNeverOnReplica: a statement routed to a replica by a read
// carries the replica's pool, and every statement derived from it
// inherits it; every write API through such a statement runs on the
// primary. With replay paused the write is on the primary, on no replica
// (the MariaDB replica accepts writes: one that landed there would show),
// and the next read is fresh. On PostgreSQL a write sent to a replica
// fails ("read-only transaction"); on MariaDB it would silently diverge.
func TestWritesNeverOnReplica(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) {
			for i, w := range inheritedWrites {
				t.Run(w.name, func(t *testing.T) {
					e := newEngineEnv(t, engine)
					runInheritedWrite(t, e, w, uint(i+1))
				})
			}
		})
	}
}

func runInheritedWrite(t *testing.T, e *env, w inheritedWrite, id uint) {
	t.Helper()
	if !w.created {
		if err := e.db.Create(&Item{ID: id, Name: "old", Version: 1}).Error; err != nil {
			t.Fatal(err)
		}
	}
	e.resumeAll()
	e.waitReplicaServes(e.db)
	e.pauseAll()

	base := e.db.Model(&Item{}).Where("id <= ?", 10000)
	e.mustRouteToReplica(base)

	before := "old"
	if w.created {
		before = ""
	}
	if err := w.write(base, id); err != nil {
		t.Fatalf("write through the inherited statement: %v", err)
	}
	primary, err := gorm.Open(e.c.primary(e.dbName), quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB(primary)
	if got := itemName(t, primary, id); got != w.want {
		t.Fatalf("on the primary item %d is %q, want %q", id, got, w.want)
	}
	for i := 0; i < e.c.replicas(); i++ {
		r, err := gorm.Open(e.c.replica(i, e.dbName), quiet())
		if err != nil {
			t.Fatal(err)
		}
		got := itemName(t, r, id)
		closeDB(r)
		if got != before {
			t.Fatalf("replica %d, replay paused, has item %d %q (want %q): THE WRITE RAN ON THE REPLICA", i, id, got, before)
		}
	}
	if w.name == "Association Append" {
		got := readPart(e, e.db, id)
		if got.Name != "new" {
			t.Fatalf("STALE READ of the appended part: %+v", got)
		}
		e.mustPrimary(got, "read of the appended part")
		return
	}
	if got := itemName(t, e.db, id); got != w.want {
		t.Fatalf("STALE READ through the plugin: item %d is %q, want %q", id, got, w.want)
	}
}

// itemName is item id's name on db, "" when there is none.
func itemName(t *testing.T, db *gorm.DB, id uint) string {
	t.Helper()
	var names []string
	if err := db.Raw("SELECT name FROM items WHERE id = ?", id).Scan(&names).Error; err != nil {
		t.Fatalf("read item %d: %v", id, err)
	}
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// TestWriteOnReplicaPoolRefused: a write that still reaches a replica's
// pool (here another callback puts one back on the statement after the
// plugin put the write on the primary) is refused before it is sent, with
// plugin.ErrWriteOnReplica, on both engines; nothing reaches the replica.
func TestWriteOnReplicaPoolRefused(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) {
			e := newEngineEnv(t, engine)
			if err := e.db.Create(&Item{ID: 1, Name: "old", Version: 1}).Error; err != nil {
				t.Fatal(err)
			}
			e.resumeAll()
			e.waitReplicaServes(e.db)
			read := e.db.Model(&Item{})
			e.mustRouteToReplica(read)
			replicaPool := read.Statement.ConnPool
			misroute := func(db *gorm.DB) {
				if _, ok := db.Statement.Settings.Load("test:misroute"); ok {
					db.Statement.ConnPool = replicaPool
				}
			}
			cb := e.db.Callback()
			if err := cb.Raw().After("freshread:write_on_primary").Before("gorm:raw").Register("test:misroute", misroute); err != nil {
				t.Fatal(err)
			}
			if err := cb.Update().After("freshread:write_on_primary").Before("freshread:mark_write").Register("test:misroute", misroute); err != nil {
				t.Fatal(err)
			}
			bad := e.db.Set("test:misroute", true).Session(&gorm.Session{SkipDefaultTransaction: true})
			err := bad.Exec("UPDATE items SET name = 'exec' WHERE id = 1").Error
			if !plugin.IsWriteOnReplica(err) {
				t.Errorf("an Exec on a replica's pool: %v, want ErrWriteOnReplica", err)
			}
			err = bad.Model(&Item{ID: 1}).Update("name", "update").Error
			if !plugin.IsWriteOnReplica(err) {
				t.Errorf("an Update on a replica's pool: %v, want ErrWriteOnReplica", err)
			}
			e.waitCaughtUp()
			for i := 0; i < e.c.replicas(); i++ {
				r, err := gorm.Open(e.c.replica(i, e.dbName), quiet())
				if err != nil {
					t.Fatal(err)
				}
				got := itemName(t, r, 1)
				closeDB(r)
				if got != "old" {
					t.Fatalf("replica %d has item 1 %q, want \"old\": a refused write reached it", i, got)
				}
			}
		})
	}
}

// mustRouteToReplica reads items through db (a chain whose statement then
// carries the pool the read was routed to) and fails the test unless the
// plugin routed it to a replica.
func (e *env) mustRouteToReplica(db *gorm.DB) {
	e.t.Helper()
	e.mu.Lock()
	n := len(e.decisions)
	e.mu.Unlock()
	var rows []Item
	if err := db.Find(&rows).Error; err != nil {
		e.t.Fatal(err)
	}
	e.mu.Lock()
	routed := slices.Clone(e.decisions[n:])
	e.mu.Unlock()
	if len(routed) == 0 || routed[0].Target != plugin.ReplicaTarget {
		e.t.Fatalf("the read was not routed to a replica (%+v): the test proves nothing", routed)
	}
}
