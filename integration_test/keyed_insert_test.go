package integration_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"gorm.io/gorm"
)

// Raw INSERTs: one whose column list names the primary key, with a value
// in each row, raises those rows' keys; one that may write a row it does
// not list (an upsert on another unique key, REPLACE, INSERT ... SELECT,
// a key the database assigns) raises the table's unkeyed position.

// intReads are the ways a test reads row id of table, keyed by an
// integer: raw SQL and db.Table (and the Item model for items).
func (e *env) intReads(db *gorm.DB, table string, id int) map[string]served {
	e.t.Helper()
	sel := "name, version, " + e.c.portExpr() + " AS port"
	reads := map[string]served{
		"raw SQL": e.readRow(db, table, func(db *gorm.DB, s *served) error {
			return db.Raw("SELECT "+sel+" FROM "+table+" WHERE id = ?", id).Scan(s).Error
		}),
		"db.Table": e.readRow(db, table, func(db *gorm.DB, s *served) error {
			return db.Table(table).Select(sel).Where("id = ?", id).Scan(s).Error
		}),
	}
	if table == "items" {
		reads["the model"] = e.readItem(db, uint(id))
	}
	return reads
}

// mustPrimaries fails the test unless the primary served every read.
func (e *env) mustPrimaries(reads map[string]served, after string) {
	e.t.Helper()
	for what, got := range reads {
		e.mustPrimary(got, "a read through "+what+" after "+after)
	}
}

// write runs a raw write through e.db, failing the test on an error.
func (e *env) write(sql string, args ...any) {
	e.t.Helper()
	e.t.Logf("step: %s %v", sql, args)
	if err := e.db.Exec(sql, args...).Error; err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

// returnedIDs runs a raw INSERT ... RETURNING id through e.db's Row chain
// (Raw(...).Scan) and returns the ids.
func (e *env) returnedIDs(sql string, args ...any) []int {
	e.t.Helper()
	e.t.Logf("step: %s %v", sql, args)
	var ids []int
	if err := e.db.Raw(sql, args...).Scan(&ids).Error; err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return ids
}

// checkKeyedRawInsert: with replay paused before each write, a raw INSERT
// of rows that lists their keys (placeholders or literals; one row or
// several; through Exec or Raw(...).Scan with RETURNING) leaves reads of
// an untouched row on a replica, with its data, and the inserted rows are
// never read stale; the same for a uuid key given as an upper-case
// string, for KeyColumns (parts by item_id), and, on PostgreSQL, for ON
// CONFLICT DO NOTHING and an upsert on the primary key. The forms that may
// write an unlisted row make keyed reads of the table wait and are never
// read stale: an upsert on another unique key (ON CONFLICT (slot) DO
// UPDATE, ON DUPLICATE KEY UPDATE), REPLACE, INSERT ... SELECT, a key the
// database assigns. One the database assigns and the INSERT returns
// (RETURNING id; on MariaDB also for an id of 0, the next AUTO_INCREMENT
// value), through Raw(...).Scan or the Query chain, is keyed by the keys
// returned.
func checkKeyedRawInsert(t *testing.T, engine string) {
	e := newEngineEnv(t, engine, keyedParts)
	e.seedParts(2)
	serial := map[string]string{"postgres": "SERIAL", "mariadb": "INT AUTO_INCREMENT"}[engine]
	for _, ddl := range []string{
		"CREATE TABLE tokens (id UUID PRIMARY KEY, name VARCHAR(40), version INT)",
		"CREATE TABLE slots (id INT PRIMARY KEY, slot INT UNIQUE, name VARCHAR(40), version INT)",
		"CREATE TABLE serials (id " + serial + " PRIMARY KEY, name VARCHAR(40), version INT)",
	} {
		e.write(ddl)
	}
	a, b := uuid.New(), uuid.New()
	if err := e.db.Create(&Token{ID: b, Name: "old", Version: 1}).Error; err != nil {
		t.Fatal(err)
	}
	e.write("INSERT INTO slots (id, slot, name, version) VALUES (1, 10, 'old', 1), (2, 20, 'old', 1)")
	e.write("INSERT INTO serials (name, version) VALUES ('old', 1), ('old', 1)")

	untouched := func(after string) {
		t.Helper()
		reads := e.intReads(e.db, "items", 2)
		e.mustRead(reads, "item", after)
		e.mustReplicas(reads, after)
	}

	e.step("the seeded rows replicated")
	e.write("INSERT INTO items (id, name, version) VALUES (?, ?, ?)", 3, "created", 1)
	e.mustRead(e.intReads(e.db, "items", 3), "created", "a raw insert of item 3")
	untouched("a raw insert of item 3")

	e.step("the writes so far replicated")
	ids := e.returnedIDs("INSERT INTO items (id, name, version) VALUES (4, 'created', 1), (5, 'created', 1) RETURNING id")
	if !slices.Equal(ids, []int{4, 5}) {
		t.Fatalf("RETURNING id: %v", ids)
	}
	for _, id := range ids {
		e.mustRead(e.intReads(e.db, "items", id), "created", "a raw insert of items 4 and 5")
	}
	untouched("a raw insert of items 4 and 5 through Raw(...).Scan")

	e.step("the writes so far replicated")
	e.write("INSERT INTO parts (id, item_id, label) VALUES (?, ?, ?)", 4, 3, "d")
	e.onlyPartFresh(3, 4, "d", "a raw insert of part 4")
	rows := e.rawPartsOf(e.db, 2)
	e.partsMustBe(rows, "item 2's parts (raw)", "b", "c")
	e.partsOnReplica(rows, "item 2's parts (raw) after a raw insert of item 3's part")
	untouched("a raw insert of part 4")

	e.step("the writes so far replicated")
	e.write("INSERT INTO tokens (id, name, version) VALUES (?, ?, ?)", strings.ToUpper(a.String()), "created", 1)
	e.mustRead(e.tokenReads(e.db, a), "created", "a raw insert of token A by its upper-case string")
	reads := e.tokenReads(e.db, b)
	e.mustRead(reads, "old", "a raw insert of token A")
	e.mustReplicas(reads, "a raw insert of token A")

	if engine == "postgres" {
		e.step("the writes so far replicated")
		e.write("INSERT INTO items (id, name, version) VALUES (6, 'created', 1) ON CONFLICT DO NOTHING")
		e.mustRead(e.intReads(e.db, "items", 6), "created", "a raw insert of item 6 ON CONFLICT DO NOTHING")
		untouched("a raw insert of item 6 ON CONFLICT DO NOTHING")

		e.step("the writes so far replicated")
		e.write("INSERT INTO items (id, name, version) VALUES (?, ?, 2) ON CONFLICT (id) DO UPDATE SET name = excluded.name", 3, "upserted")
		e.mustRead(e.intReads(e.db, "items", 3), "upserted", "an upsert of item 3 on its primary key")
		untouched("an upsert of item 3 on its primary key")
	}

	// The forms that may write a row they do not list: keyed reads of
	// the table wait (the primary serves them), never stale.
	unkeyed := func(table string, wrote int, name string, other int, otherName, after string) {
		t.Helper()
		e.mustRead(e.intReads(e.db, table, wrote), name, after)
		reads := e.intReads(e.db, table, other)
		e.mustRead(reads, otherName, after)
		e.mustPrimaries(reads, after)
	}
	e.step("the writes so far replicated")
	upsert := map[string]string{
		"postgres": "INSERT INTO slots (id, slot, name, version) VALUES (3, 20, 'upserted', 1) ON CONFLICT (slot) DO UPDATE SET name = excluded.name",
		"mariadb":  "INSERT INTO slots (id, slot, name, version) VALUES (3, 20, 'upserted', 1) ON DUPLICATE KEY UPDATE name = VALUES(name)",
	}[engine]
	e.write(upsert)
	unkeyed("slots", 2, "upserted", 1, "old", "an upsert listing slot 3 that updated slot 2 (another unique key)")

	if engine == "mariadb" {
		e.step("the writes so far replicated")
		e.write("REPLACE INTO slots (id, slot, name, version) VALUES (4, 10, 'replaced', 1)")
		const after = "a REPLACE of slot 4 that deleted slot 1 (another unique key)"
		for what, got := range e.intReads(e.db, "slots", 1) {
			if got != (served{}) {
				t.Fatalf("STALE READ of slot 1 through %s after %s: %+v, want no row", what, after, got)
			}
		}
		unkeyed("slots", 4, "replaced", 2, "upserted", after)
	}

	e.step("the writes so far replicated")
	e.write("INSERT INTO slots (id, slot, name, version) SELECT 5, 50, 'copied', 1 FROM slots WHERE id = 2")
	unkeyed("slots", 5, "copied", 2, "upserted", "an INSERT ... SELECT of slot 5")

	e.step("the writes so far replicated")
	e.write("INSERT INTO serials (name, version) VALUES ('auto', 1)")
	unkeyed("serials", 3, "auto", 1, "old", "a raw insert whose key the database assigned")

	// Keys the database assigned, read back with RETURNING: keyed by the
	// keys returned.
	keyedByResult := func(ids []int, name, after string) {
		t.Helper()
		if len(ids) == 0 || slices.Contains(ids, 0) {
			t.Fatalf("RETURNING id after %s: %v", after, ids)
		}
		for _, id := range ids {
			e.mustRead(e.intReads(e.db, "serials", id), name, after)
		}
		reads := e.intReads(e.db, "serials", 1)
		e.mustRead(reads, "old", after)
		e.mustReplicas(reads, after)
	}
	e.step("the writes so far replicated")
	keyedByResult(e.returnedIDs("INSERT INTO serials (name, version) VALUES ('returned', 1), ('returned', 1) RETURNING id"),
		"returned", "a raw insert of two rows whose keys the database assigned, read back with RETURNING through Raw(...).Scan")

	e.step("the writes so far replicated")
	var found []struct {
		Name string
		ID   int
	}
	if err := e.db.Raw("INSERT INTO serials (name, version) VALUES ('found', 1) RETURNING name, id").Find(&found).Error; err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Name != "found" {
		t.Fatalf("RETURNING name, id: %+v", found)
	}
	keyedByResult([]int{found[0].ID}, "found", "a raw insert whose key the database assigned, read back with RETURNING through the Query chain (Find)")

	if engine == "mariadb" {
		e.step("the writes so far replicated")
		keyedByResult(e.returnedIDs("INSERT INTO serials (id, name, version) VALUES (?, 'zero', 1) RETURNING id", 0),
			"zero", "a raw insert of id 0 (the next AUTO_INCREMENT value), read back with RETURNING")
	}
	e.resumeAll()
}

func TestKeyedRawInsert(t *testing.T)        { checkKeyedRawInsert(t, "postgres") }
func TestMariaDBKeyedRawInsert(t *testing.T) { checkKeyedRawInsert(t, "mariadb") }
