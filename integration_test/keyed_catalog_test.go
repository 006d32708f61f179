package integration_test

import (
	"fmt"
	"strconv"
	"testing"

	"gorm.io/gorm"
)

// Primary keys from the catalog: a process that never uses a model keys
// raw SQL and db.Table statements by the primary key it read from the
// catalog at start (or after a schema change it ran), under the same key
// signature as a process that learnt the key from a model. With replay
// paused, a write of row 1 by either leaves reads of row 2 on the
// replicas, and row 1 is never read stale.

// rawItem reads item id through raw SQL, with the server that served it.
func (e *env) rawItem(db *gorm.DB, id uint) served {
	e.t.Helper()
	var s served
	if err := db.Raw("SELECT name, version, "+e.c.portExpr()+" AS port FROM items WHERE id = ?", id).Scan(&s).Error; err != nil {
		e.t.Fatalf("raw read of item %d: %v", id, err)
	}
	return s
}

// tableItem reads item id through db.Table and a string condition (no
// model), with the server that served it.
func (e *env) tableItem(db *gorm.DB, id uint) served {
	e.t.Helper()
	return e.tableRead(db, "item "+fmt.Sprint(id), func(q *gorm.DB) *gorm.DB { return q.Where("id = ?", id) })
}

// tableRead reads one item through db.Table (no model) with where's
// conditions, with the server that served it.
func (e *env) tableRead(db *gorm.DB, what string, where func(*gorm.DB) *gorm.DB) served {
	e.t.Helper()
	var s served
	if err := where(db.Table("items").Select("name, version, " + e.c.portExpr() + " AS port")).Limit(1).Scan(&s).Error; err != nil {
		e.t.Fatalf("db.Table read of %s: %v", what, err)
	}
	return s
}

// tableMapItem reads item id through db.Table into a map (GORM's Query
// chain without a model).
func (e *env) tableMapItem(db *gorm.DB, id uint) served {
	e.t.Helper()
	m := map[string]any{}
	if err := db.Table("items").Select("name, version, " + e.c.portExpr() + " AS port").Where(map[string]any{"id": id}).Find(&m).Error; err != nil {
		e.t.Fatalf("db.Table read of item %d into a map: %v", id, err)
	}
	return served{Name: text(m["name"]), Version: number(m["version"]), Port: number(m["port"])}
}

func text(v any) string {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return fmt.Sprint(v)
}

func number(v any) int {
	n, _ := strconv.Atoi(text(v))
	return n
}

// mustRead fails the test unless every read returned name (a read is
// named by the path it took).
func (e *env) mustRead(reads map[string]served, name, after string) {
	e.t.Helper()
	for what, got := range reads {
		if got.Name != name {
			e.t.Fatalf("STALE READ through %s after %s: %+v, want %q", what, after, got, name)
		}
	}
}

// mustReplicas fails the test unless a replica served every read.
func (e *env) mustReplicas(reads map[string]served, after string) {
	e.t.Helper()
	for what, got := range reads {
		e.mustReplica(got, "a read through "+what+" after "+after)
	}
}

// checkKeyedCatalog: e.db uses the Item model; other never does. first
// names the process whose keyed read records the table's signature.
func checkKeyedCatalog(t *testing.T, newEnv func(*testing.T, ...envOpt) *env, first string, redis bool) {
	opts := []envOpt{keyed}
	if redis {
		s, _ := newRedisStore(t, t.Name())
		opts = append(opts, withStore(s))
	}
	e := newEnv(t, opts...)
	other, _ := e.open(keyed)
	if err := other.Exec("INSERT INTO items (id, name, version) VALUES (1, 'old', 1), (2, 'old', 1), (3, 'old', 1)").Error; err != nil {
		t.Fatal(err)
	}
	e.step("items 1 to 3 written by raw SQL and replicated", other)
	if first == "catalog" {
		e.mustReplica(e.rawItem(other, 1), "a raw read by key by the process without a model")
		e.mustReplica(e.readItem(e.db, 1), "a read by key by the process with the model")
	} else {
		e.mustReplica(e.readItem(e.db, 1), "a read by key by the process with the model")
		e.mustReplica(e.rawItem(other, 1), "a raw read by key by the process without a model")
	}

	e.t.Log("step: the process without a model updates row 1 by raw SQL")
	if err := other.Exec("UPDATE items SET name = ? WHERE id = ?", "new", 1).Error; err != nil {
		t.Fatal(err)
	}
	after := "a raw write of row 1 by key"
	e.mustRead(map[string]served{
		"raw SQL":                   e.rawItem(other, 1),
		"db.Table":                  e.tableItem(other, 1),
		"db.Table into a map":       e.tableMapItem(other, 1),
		"the model, by the other":   e.readItem(e.db, 1),
		"raw SQL, by the other":     e.rawItem(e.db, 1),
		"db.Table, by the other":    e.tableItem(e.db, 1),
		"db.Table with OR":          e.orItem(other, 1),
		"db.Table, a range of keys": e.rangeItem(other, 1),
	}, "new", after)
	row2 := map[string]served{
		"raw SQL":                 e.rawItem(other, 2),
		"db.Table":                e.tableItem(other, 2),
		"db.Table into a map":     e.tableMapItem(other, 2),
		"the model, by the other": e.readItem(e.db, 2),
	}
	e.mustRead(row2, "old", after)
	e.mustReplicas(row2, after)

	e.step("row 1 replicated", other)
	e.t.Log("step: the process without a model updates row 1 through db.Table")
	if err := other.Table("items").Where("id = ?", 1).Update("name", "newer").Error; err != nil {
		t.Fatal(err)
	}
	after = "a db.Table write of row 1 by key"
	e.mustRead(map[string]served{
		"db.Table":                e.tableItem(other, 1),
		"db.Table into a map":     e.tableMapItem(other, 1),
		"raw SQL":                 e.rawItem(other, 1),
		"the model, by the other": e.readItem(e.db, 1),
		"db.Table with OR":        e.orItem(other, 1),
	}, "newer", after)
	e.mustReplicas(map[string]served{
		"db.Table":                e.tableItem(other, 2),
		"raw SQL":                 e.rawItem(other, 2),
		"the model, by the other": e.readItem(e.db, 2),
	}, after)

	e.step("row 1 replicated", other)
	e.t.Log("step: the process without a model creates row 4 through db.Table from a map")
	if err := other.Table("items").Create(map[string]any{"id": 4, "name": "created", "version": 1}).Error; err != nil {
		t.Fatal(err)
	}
	after = "a db.Table create of row 4 from a map"
	e.mustRead(map[string]served{
		"db.Table":                e.tableItem(other, 4),
		"raw SQL":                 e.rawItem(other, 4),
		"the model, by the other": e.readItem(e.db, 4),
	}, "created", after)
	e.mustReplicas(map[string]served{
		"db.Table":                e.tableItem(other, 2),
		"raw SQL":                 e.rawItem(other, 2),
		"the model, by the other": e.readItem(e.db, 2),
	}, after)

	e.t.Log("step: the model process updates row 3 by key; the other reads it through db.Table")
	if err := setName(e.db, 3); err != nil {
		t.Fatal(err)
	}
	if got := e.tableItem(other, 3); got.Name != "new" {
		t.Fatalf("STALE READ of row 3 through db.Table after a model write by key: %+v", got)
	}
	e.mustReplica(e.tableItem(other, 2), "a db.Table read of row 2 after a model write of row 3")

	e.t.Log("step: the process without a model deletes row 3 through db.Table")
	if err := other.Table("items").Where("id = ?", 3).Delete(map[string]any{}).Error; err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := other.Table("items").Where("id IN ?", []uint{2, 3}).Count(&n).Error; err != nil || n != 1 {
		t.Fatalf("STALE READ through a db.Table count after a db.Table delete by key: %d rows, %v", n, err)
	}
	if err := e.db.Model(&Item{}).Where("id = ?", 3).Count(&n).Error; err != nil || n != 0 {
		t.Fatalf("STALE READ through a model count after a db.Table delete by key: %d rows, %v", n, err)
	}
	e.mustReplica(e.tableItem(other, 2), "a db.Table read of row 2 after a db.Table delete of row 3")

	e.t.Log("step: a db.Table update that proves no key")
	if err := other.Table("items").Where("name = ?", "old").Update("version", 7).Error; err != nil {
		t.Fatal(err)
	}
	for what, got := range map[string]served{
		"db.Table":                e.tableItem(other, 2),
		"raw SQL":                 e.rawItem(other, 2),
		"the model, by the other": e.readItem(e.db, 2),
	} {
		if got.Version != 7 {
			t.Fatalf("STALE READ of row 2 through %s after a db.Table update without a key: %+v", what, got)
		}
	}
	e.resumeAll()
}

// orItem reads item id through db.Table with an OR (by table position).
func (e *env) orItem(db *gorm.DB, id uint) served {
	e.t.Helper()
	return e.tableRead(db, "an item by OR", func(q *gorm.DB) *gorm.DB { return q.Where("id = ? OR name = ?", id, "nothing") })
}

// rangeItem reads the first item from id on through db.Table.
func (e *env) rangeItem(db *gorm.DB, id uint) served {
	e.t.Helper()
	return e.tableRead(db, "an item of a range", func(q *gorm.DB) *gorm.DB { return q.Where("id >= ?", id).Order("id") })
}

func TestKeyedCatalog(t *testing.T) {
	for _, c := range []struct {
		first string
		redis bool
	}{{"catalog", false}, {"model", false}, {"catalog", true}, {"model", true}} {
		t.Run(fmt.Sprintf("%s-first/redis=%v", c.first, c.redis), func(t *testing.T) { checkKeyedCatalog(t, newEnv, c.first, c.redis) })
	}
}

func TestMariaDBKeyedCatalog(t *testing.T) {
	for _, first := range []string{"catalog", "model"} {
		t.Run(first+"-first", func(t *testing.T) { checkKeyedCatalog(t, newMariaEnv, first, true) })
	}
}

// checkKeyedCatalogAfterDDL: a table the process creates after it started
// (its primary key is not in the catalog it read at start) is keyed from
// its first raw statement: the plugin rereads the keys after the CREATE;
// and after dropPrimaryKey, by table again.
func checkKeyedCatalogAfterDDL(t *testing.T, newEnv func(*testing.T, ...envOpt) *env, dropPrimaryKey string) {
	e := newEnv(t, keyed)
	if err := e.db.Exec("CREATE TABLE notes (id BIGINT PRIMARY KEY, body VARCHAR(40))").Error; err != nil {
		t.Fatal(err)
	}
	if err := e.db.Exec("INSERT INTO notes (id, body) VALUES (1, 'old'), (2, 'old')").Error; err != nil {
		t.Fatal(err)
	}
	e.step("notes created and replicated")
	if err := e.db.Exec("UPDATE notes SET body = ? WHERE id = ?", "new", 1).Error; err != nil {
		t.Fatal(err)
	}
	note := func(id uint) served {
		var s served
		if err := e.db.Raw("SELECT body AS name, "+e.c.portExpr()+" AS port FROM notes WHERE id = ?", id).Scan(&s).Error; err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := note(1); got.Name != "new" {
		t.Fatalf("STALE READ of note 1 after a raw write by key: %+v", got)
	}
	got := note(2)
	if got.Name != "old" {
		t.Fatalf("note 2: %+v", got)
	}
	e.mustReplica(got, "a raw read of note 2 after a raw write of note 1 (a table created after start)")

	// Without its primary key the table is read by table position again.
	if err := e.db.Exec(dropPrimaryKey).Error; err != nil {
		t.Fatal(err)
	}
	e.step("the primary key dropped and replicated")
	if err := e.db.Exec("UPDATE notes SET body = ? WHERE id = ?", "newer", 1).Error; err != nil {
		t.Fatal(err)
	}
	if got := note(1); got.Name != "newer" {
		t.Fatalf("STALE READ of note 1 after a raw write, its primary key dropped: %+v", got)
	}
	got = note(2)
	if got.Name != "old" {
		t.Fatalf("note 2: %+v", got)
	}
	e.mustPrimary(got, "a raw read of note 2 after a raw write of note 1, the primary key dropped (by table)")
	e.resumeAll()
}

func TestKeyedCatalogAfterDDL(t *testing.T) {
	checkKeyedCatalogAfterDDL(t, newEnv, "ALTER TABLE notes DROP CONSTRAINT notes_pkey")
}

func TestMariaDBKeyedCatalogAfterDDL(t *testing.T) {
	checkKeyedCatalogAfterDDL(t, newMariaEnv, "ALTER TABLE notes DROP PRIMARY KEY")
}
