package integration_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"gorm.io/gorm"
)

// Keys of other types than integers, from the catalog: with replay
// paused, a write of row A leaves reads of an untouched row B on the
// replicas (with B's data), and row A is never read stale.

// Token is a model whose primary key is a uuid (PostgreSQL's uuid,
// MariaDB's UUID type).
type Token struct {
	ID      uuid.UUID `gorm:"primaryKey"`
	Name    string
	Version int
}

// keyedRow reads a row of a keyed table with the server that served it:
// read runs the query (its SELECT list aliases name, version and port).
type keyedRow func(db *gorm.DB, s *served) error

// readRow runs read on db, failing the test on an error.
func (e *env) readRow(db *gorm.DB, what string, read keyedRow) served {
	e.t.Helper()
	var s served
	if err := read(db, &s); err != nil {
		e.t.Fatalf("read %s: %v", what, err)
	}
	return s
}

// tokenReads are the ways a test reads token id (uuidReads).
func (e *env) tokenReads(db *gorm.DB, id uuid.UUID) map[string]served {
	e.t.Helper()
	return e.uuidReads(db, &Token{}, "tokens", id)
}

// uuidReads are the ways a test reads row id of table, keyed by a uuid:
// model with a uuid.UUID, model with the upper-case string, raw SQL
// with the string, db.Table with the uuid.UUID.
func (e *env) uuidReads(db *gorm.DB, model any, table string, id uuid.UUID) map[string]served {
	e.t.Helper()
	sel := "name, version, " + e.c.portExpr() + " AS port"
	return map[string]served{
		"the model": e.readRow(db, table, func(db *gorm.DB, s *served) error {
			return db.Model(model).Select(sel).Where("id = ?", id).Scan(s).Error
		}),
		"the model, an upper-case string": e.readRow(db, table, func(db *gorm.DB, s *served) error {
			return db.Model(model).Select(sel).Where("id = ?", strings.ToUpper(id.String())).Scan(s).Error
		}),
		"raw SQL": e.readRow(db, table, func(db *gorm.DB, s *served) error {
			return db.Raw("SELECT "+sel+" FROM "+table+" WHERE id = ?", id.String()).Scan(s).Error
		}),
		"db.Table": e.readRow(db, table, func(db *gorm.DB, s *served) error {
			return db.Table(table).Select(sel).Where("id = ?", id).Scan(s).Error
		}),
	}
}

// createDeleteSteps are the steps the tests of every key type share, each
// once the writes before it are replicated and replay is paused again: a
// GORM Create of row C (created, which readsC must read fresh), then a
// GORM Delete of row A (deleted, which whereA must count 0 of); untouched
// checks row B after each.
func (e *env) createDeleteSteps(what string, created any, readsC func() map[string]served, deleted any, whereA *gorm.DB, untouched func(after string)) {
	e.t.Helper()
	e.step("the writes so far replicated")
	e.t.Logf("step: GORM creates %s C", what)
	if err := e.db.Create(created).Error; err != nil {
		e.t.Fatal(err)
	}
	e.mustRead(readsC(), "created", "a GORM create of "+what+" C")
	untouched("a GORM create of " + what + " C")

	e.step("the writes so far replicated")
	e.t.Logf("step: GORM deletes %s A", what)
	if err := e.db.Delete(deleted).Error; err != nil {
		e.t.Fatal(err)
	}
	var n int64
	if err := whereA.Count(&n).Error; err != nil || n != 0 {
		e.t.Fatalf("STALE READ of %s A after its delete: %d rows, %v", what, n, err)
	}
	untouched("a GORM delete of " + what + " A")
}

// TestKeyedUUID, on both engines: a table with a uuid primary key
// (created through the plugin, which reads its key from the catalog) is
// keyed by it: GORM Update, Create and Delete and a raw UPDATE of row A,
// while replay is paused, leave every read of row B on a replica, and row
// A is never read stale.
func TestKeyedUUID(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) {
			e := newEngineEnv(t, engine, keyed)
			if err := e.db.Exec("CREATE TABLE tokens (id UUID PRIMARY KEY, name VARCHAR(40), version INT)").Error; err != nil {
				t.Fatal(err)
			}
			a, b, c := uuid.New(), uuid.New(), uuid.New()
			for _, id := range []uuid.UUID{a, b} {
				if err := e.db.Create(&Token{ID: id, Name: "old", Version: 1}).Error; err != nil {
					t.Fatal(err)
				}
			}
			e.step("tokens A and B written and replicated")

			untouched := func(after string) {
				e.t.Helper()
				reads := e.tokenReads(e.db, b)
				e.mustRead(reads, "old", after)
				e.mustReplicas(reads, after)
			}

			e.t.Log("step: GORM updates token A")
			if err := e.db.Model(&Token{ID: a}).Update("name", "new").Error; err != nil {
				t.Fatal(err)
			}
			e.mustRead(e.tokenReads(e.db, a), "new", "a GORM update of token A")
			untouched("a GORM update of token A")

			e.step("the writes so far replicated")
			e.t.Log("step: raw SQL updates token A by its upper-case string")
			if err := e.db.Exec("UPDATE tokens SET name = ? WHERE id = ?", "newer", strings.ToUpper(a.String())).Error; err != nil {
				t.Fatal(err)
			}
			e.mustRead(e.tokenReads(e.db, a), "newer", "a raw update of token A")
			untouched("a raw update of token A")

			e.createDeleteSteps("token", &Token{ID: c, Name: "created"}, func() map[string]served { return e.tokenReads(e.db, c) },
				&Token{ID: a}, e.db.Model(&Token{}).Where("id = ?", a), untouched)

			e.step("the writes so far replicated")
			e.t.Log("step: an update without a key")
			if err := e.db.Model(&Token{}).Where("name = ?", "old").Update("version", 7).Error; err != nil {
				t.Fatal(err)
			}
			for what, got := range e.tokenReads(e.db, b) {
				if got.Version != 7 {
					t.Fatalf("STALE READ of token B through %s after an update without a key: %+v", what, got)
				}
			}
			e.resumeAll()
		})
	}
}

// OrderLine is a model whose primary key is composite: a uuid and an integer
// (the catalog's order: order_id, n).
type OrderLine struct {
	OrderID uuid.UUID `gorm:"primaryKey"`
	N       int       `gorm:"primaryKey;autoIncrement:false"`
	Name    string
	Version int
}

// lineReads are the ways a test reads line (order, n): the model with a
// struct condition, raw SQL, db.Table.
func (e *env) lineReads(db *gorm.DB, order uuid.UUID, n int) map[string]served {
	e.t.Helper()
	sel := "name, version, " + e.c.portExpr() + " AS port"
	return map[string]served{
		"the model": e.readRow(db, "a line", func(db *gorm.DB, s *served) error {
			return db.Model(&OrderLine{}).Select(sel).Where(&OrderLine{OrderID: order, N: n}).Scan(s).Error
		}),
		"raw SQL": e.readRow(db, "a line", func(db *gorm.DB, s *served) error {
			return db.Raw("SELECT "+sel+" FROM order_lines WHERE n = ? AND order_id = ?", n, order.String()).Scan(s).Error
		}),
		"db.Table": e.readRow(db, "a line", func(db *gorm.DB, s *served) error {
			return db.Table("order_lines").Select(sel).Where("order_id = ? AND n = ?", order, n).Scan(s).Error
		}),
	}
}

// TestKeyedComposite, on both engines: a table whose primary key is
// composite (order_id, n) is keyed where every column is pinned: GORM
// Update, Delete and Create and a raw UPDATE of line A = (o, 1), while
// replay is paused, leave reads of line B = (o, 2), of the same order, on
// a replica; line A is never read stale, nor through a read pinned by
// order_id alone.
func TestKeyedComposite(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) {
			e := newEngineEnv(t, engine, keyed)
			if err := e.db.Exec("CREATE TABLE order_lines (order_id UUID NOT NULL, n INT NOT NULL, name VARCHAR(40), version INT, PRIMARY KEY (order_id, n))").Error; err != nil {
				t.Fatal(err)
			}
			o := uuid.New()
			for n := 1; n <= 2; n++ {
				if err := e.db.Create(&OrderLine{OrderID: o, N: n, Name: "old", Version: 1}).Error; err != nil {
					t.Fatal(err)
				}
			}
			e.step("lines A and B written and replicated")
			untouched := func(after string) {
				e.t.Helper()
				reads := e.lineReads(e.db, o, 2)
				e.mustRead(reads, "old", after)
				e.mustReplicas(reads, after)
			}
			byOrder := func(name, after string) {
				e.t.Helper()
				var names []string
				if err := e.db.Model(&OrderLine{}).Where("order_id = ?", o).Order("n").Pluck("name", &names).Error; err != nil {
					t.Fatal(err)
				}
				if len(names) == 0 || names[0] != name {
					t.Fatalf("STALE READ of the order's lines (pinned by order_id alone) after %s: %q, want %q first", after, names, name)
				}
			}

			e.t.Log("step: GORM updates line A")
			if err := e.db.Model(&OrderLine{OrderID: o, N: 1}).Update("name", "new").Error; err != nil {
				t.Fatal(err)
			}
			e.mustRead(e.lineReads(e.db, o, 1), "new", "a GORM update of line A")
			byOrder("new", "a GORM update of line A")
			untouched("a GORM update of line A")

			e.step("the writes so far replicated")
			e.t.Log("step: raw SQL updates line A")
			if err := e.db.Exec("UPDATE order_lines SET name = ? WHERE order_id = ? AND n = ?", "newer", o.String(), 1).Error; err != nil {
				t.Fatal(err)
			}
			e.mustRead(e.lineReads(e.db, o, 1), "newer", "a raw update of line A")
			byOrder("newer", "a raw update of line A")
			untouched("a raw update of line A")

			e.createDeleteSteps("line", &OrderLine{OrderID: o, N: 3, Name: "created"}, func() map[string]served { return e.lineReads(e.db, o, 3) },
				&OrderLine{OrderID: o, N: 1}, e.db.Model(&OrderLine{}).Where(&OrderLine{OrderID: o, N: 1}), untouched)

			e.step("the writes so far replicated")
			e.t.Log("step: an update pinned by order_id alone")
			if err := e.db.Model(&OrderLine{}).Where("order_id = ?", o).Update("version", 7).Error; err != nil {
				t.Fatal(err)
			}
			for what, got := range e.lineReads(e.db, o, 2) {
				if got.Version != 7 {
					t.Fatalf("STALE READ of line B through %s after an update pinned by order_id alone: %+v", what, got)
				}
			}
			e.resumeAll()
		})
	}
}

// Code is a model whose primary key is text.
type Code struct {
	Code    string `gorm:"primaryKey"`
	Name    string
	Version int
}

// codeReads are the ways a test reads code c of table: the model (for
// codes), raw SQL, db.Table.
func (e *env) codeReads(db *gorm.DB, table, c string) map[string]served {
	e.t.Helper()
	sel := "name, version, " + e.c.portExpr() + " AS port"
	reads := map[string]served{
		"raw SQL": e.readRow(db, "a code", func(db *gorm.DB, s *served) error {
			return db.Raw("SELECT "+sel+" FROM "+table+" WHERE code = ?", c).Scan(s).Error
		}),
		"db.Table": e.readRow(db, "a code", func(db *gorm.DB, s *served) error {
			return db.Table(table).Select(sel).Where("code = ?", c).Scan(s).Error
		}),
	}
	if table == "codes" {
		reads["the model"] = e.readRow(db, "a code", func(db *gorm.DB, s *served) error {
			return db.Model(&Code{}).Select(sel).Where(&Code{Code: c}).Scan(s).Error
		})
	}
	return reads
}

// textKeyTables are the DDL of a table whose text key compares byte-wise
// (codes) and of one whose key ignores case (folded), per engine.
var textKeyTables = map[string][2]string{
	"postgres": {
		"CREATE TABLE codes (code VARCHAR(40) PRIMARY KEY, name VARCHAR(40), version INT)",
		"CREATE TABLE folded (code VARCHAR(40) COLLATE folding PRIMARY KEY, name VARCHAR(40), version INT)",
	},
	"mariadb": {
		"CREATE TABLE codes (code VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PRIMARY KEY, name VARCHAR(40), version INT)",
		"CREATE TABLE folded (code VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci PRIMARY KEY, name VARCHAR(40), version INT)",
	},
}

// checkKeyedText: a text primary key whose equality is byte-wise is
// keyed by its value; one whose collation ignores case is not (reads by
// table). With replay paused, GORM Update, Create and Delete and raw
// UPDATEs of code A (with the characters names escape) leave reads of
// code B on a replica, and A is never read stale; on MariaDB, whose
// utf8mb4_bin ignores trailing spaces, nor after a write by A with
// trailing spaces. With redis, on the Redis store (names with spaces and
// escapes as Redis keys).
func checkKeyedText(t *testing.T, engine string, redis bool) {
	opts := []envOpt{keyed}
	if redis {
		s, _ := newRedisStore(t, t.Name())
		opts = append(opts, withStore(s))
	}
	e := newEngineEnv(t, engine, opts...)
	if engine == "postgres" {
		if err := e.db.Exec("CREATE COLLATION folding (provider = icu, locale = 'und-u-ks-level2', deterministic = false)").Error; err != nil {
			t.Fatal(err)
		}
	}
	for _, ddl := range textKeyTables[engine] {
		if err := e.db.Exec(ddl).Error; err != nil {
			t.Fatal(err)
		}
	}
	const a, b, c = "alpha #1, 100%", "beta", "gamma"
	for _, code := range []string{a, b} {
		if err := e.db.Create(&Code{Code: code, Name: "old", Version: 1}).Error; err != nil {
			t.Fatal(err)
		}
		if err := e.db.Exec("INSERT INTO folded (code, name, version) VALUES (?, 'old', 1)", code).Error; err != nil {
			t.Fatal(err)
		}
	}
	e.step("codes A and B written and replicated")
	untouched := func(after string) {
		e.t.Helper()
		reads := e.codeReads(e.db, "codes", b)
		e.mustRead(reads, "old", after)
		e.mustReplicas(reads, after)
	}

	e.t.Log("step: GORM updates code A")
	if err := e.db.Model(&Code{Code: a}).Update("name", "new").Error; err != nil {
		t.Fatal(err)
	}
	e.mustRead(e.codeReads(e.db, "codes", a), "new", "a GORM update of code A")
	untouched("a GORM update of code A")

	e.step("the writes so far replicated")
	e.t.Log("step: raw SQL updates code A")
	if err := e.db.Exec("UPDATE codes SET name = ? WHERE code = ?", "newer", a).Error; err != nil {
		t.Fatal(err)
	}
	e.mustRead(e.codeReads(e.db, "codes", a), "newer", "a raw update of code A")
	untouched("a raw update of code A")

	if engine == "mariadb" {
		e.step("the writes so far replicated")
		e.t.Log("step: raw SQL updates code A by A with trailing spaces (utf8mb4_bin is PAD SPACE)")
		res := e.db.Exec("UPDATE codes SET name = ? WHERE code = ?", "padded", a+"   ")
		if res.Error != nil || res.RowsAffected != 1 {
			t.Fatalf("an update by A with trailing spaces: %d rows, %v; want row A", res.RowsAffected, res.Error)
		}
		e.mustRead(e.codeReads(e.db, "codes", a), "padded", "a raw update of code A with trailing spaces")
		untouched("a raw update of code A with trailing spaces")
	}

	e.createDeleteSteps("code", &Code{Code: c, Name: "created"}, func() map[string]served { return e.codeReads(e.db, "codes", c) },
		&Code{Code: a}, e.db.Model(&Code{}).Where("code = ?", a), untouched)

	e.step("the writes so far replicated")
	e.t.Log("step: a table whose key ignores case: raw SQL updates code A by its upper-case spelling")
	res := e.db.Exec("UPDATE folded SET name = ? WHERE code = ?", "new", strings.ToUpper(a))
	if res.Error != nil || res.RowsAffected != 1 {
		t.Fatalf("an update of folded by A's upper-case spelling: %d rows, %v; want row A", res.RowsAffected, res.Error)
	}
	e.mustRead(e.codeReads(e.db, "folded", a), "new", "an update of a case-insensitive key by another case")
	for what, got := range e.codeReads(e.db, "folded", b) {
		e.mustPrimary(got, "a read of code B of folded through "+what+" after a write of the table (its key is not keyed)")
	}
	e.resumeAll()
}

func TestKeyedText(t *testing.T) {
	for _, redis := range []bool{false, true} {
		t.Run(fmt.Sprintf("redis=%v", redis), func(t *testing.T) { checkKeyedText(t, "postgres", redis) })
	}
}

func TestMariaDBKeyedText(t *testing.T) {
	for _, redis := range []bool{false, true} {
		t.Run(fmt.Sprintf("redis=%v", redis), func(t *testing.T) { checkKeyedText(t, "mariadb", redis) })
	}
}

// Ticket is a model whose uuid primary key the database assigns: GORM
// leaves a zero ID out of its INSERT and reads the key back with
// RETURNING (PostgreSQL; MariaDB 10.5 and later).
type Ticket struct {
	ID      uuid.UUID `gorm:"primaryKey;default:gen()"`
	Name    string
	Version int
}

// checkKeyedReturning: a GORM Create whose key the database assigns
// proves it from what GORM's RETURNING reads back into the model: with
// replay paused, reads of another ticket stay on a replica, and the new
// ticket is read fresh.
func checkKeyedReturning(t *testing.T, engine string) {
	e := newEngineEnv(t, engine, keyed)
	gen := map[string]string{"postgres": "gen_random_uuid()", "mariadb": "UUID()"}[engine]
	if err := e.db.Exec("CREATE TABLE tickets (id UUID PRIMARY KEY DEFAULT " + gen + ", name VARCHAR(40), version INT)").Error; err != nil {
		t.Fatal(err)
	}
	b := Ticket{Name: "old", Version: 1}
	if err := e.db.Create(&b).Error; err != nil || b.ID == uuid.Nil {
		t.Fatalf("create ticket B: %v, id %v (GORM read no key back)", err, b.ID)
	}
	e.step("ticket B written and replicated")
	c := Ticket{Name: "created"}
	if err := e.db.Create(&c).Error; err != nil || c.ID == uuid.Nil {
		t.Fatalf("create ticket C: %v, id %v", err, c.ID)
	}
	e.mustRead(e.uuidReads(e.db, &Ticket{}, "tickets", c.ID), "created", "a GORM create of ticket C with a key the database assigned")
	reads := e.uuidReads(e.db, &Ticket{}, "tickets", b.ID)
	e.mustRead(reads, "old", "a GORM create of ticket C")
	e.mustReplicas(reads, "a GORM create of ticket C with a key the database assigned")
	e.resumeAll()
}

func TestKeyedReturning(t *testing.T)        { checkKeyedReturning(t, "postgres") }
func TestMariaDBKeyedReturning(t *testing.T) { checkKeyedReturning(t, "mariadb") }
