package integration_test

import (
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

// tokenReads are the ways a test reads token id: the model with a
// uuid.UUID, the model with the upper-case string, raw SQL with the
// string, db.Table with the uuid.UUID.
func (e *env) tokenReads(db *gorm.DB, id uuid.UUID) map[string]served {
	e.t.Helper()
	sel := "name, version, " + e.c.portExpr() + " AS port"
	return map[string]served{
		"the model": e.readRow(db, "a token", func(db *gorm.DB, s *served) error {
			return db.Model(&Token{}).Select(sel).Where("id = ?", id).Scan(s).Error
		}),
		"the model, an upper-case string": e.readRow(db, "a token", func(db *gorm.DB, s *served) error {
			return db.Model(&Token{}).Select(sel).Where("id = ?", strings.ToUpper(id.String())).Scan(s).Error
		}),
		"raw SQL": e.readRow(db, "a token", func(db *gorm.DB, s *served) error {
			return db.Raw("SELECT "+sel+" FROM tokens WHERE id = ?", id.String()).Scan(s).Error
		}),
		"db.Table": e.readRow(db, "a token", func(db *gorm.DB, s *served) error {
			return db.Table("tokens").Select(sel).Where("id = ?", id).Scan(s).Error
		}),
	}
}

// checkKeyedUUID: a table with a uuid primary key (created through the
// plugin, which reads its key from the catalog) is keyed by it: GORM
// Update, Create and Delete and a raw UPDATE of row A, while replay is
// paused, leave every read of row B on a replica, and row A is never read
// stale.
func checkKeyedUUID(t *testing.T, newEnv func(*testing.T, ...envOpt) *env) {
	e := newEnv(t, keyed)
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

	e.t.Log("step: raw SQL updates token A by its upper-case string")
	if err := e.db.Exec("UPDATE tokens SET name = ? WHERE id = ?", "newer", strings.ToUpper(a.String())).Error; err != nil {
		t.Fatal(err)
	}
	e.mustRead(e.tokenReads(e.db, a), "newer", "a raw update of token A")
	untouched("a raw update of token A")

	e.t.Log("step: GORM creates token C")
	if err := e.db.Create(&Token{ID: c, Name: "created"}).Error; err != nil {
		t.Fatal(err)
	}
	e.mustRead(e.tokenReads(e.db, c), "created", "a GORM create of token C")
	untouched("a GORM create of token C")

	e.t.Log("step: GORM deletes token A")
	if err := e.db.Delete(&Token{ID: a}).Error; err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := e.db.Model(&Token{}).Where("id = ?", a).Count(&n).Error; err != nil || n != 0 {
		t.Fatalf("STALE READ of token A after its delete: %d rows, %v", n, err)
	}
	untouched("a GORM delete of token A")

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
}

func TestKeyedUUID(t *testing.T)        { checkKeyedUUID(t, newEnv) }
func TestMariaDBKeyedUUID(t *testing.T) { checkKeyedUUID(t, newMariaEnv) }

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

// checkKeyedComposite: a table whose primary key is composite (order_id,
// n) is keyed where every column is pinned: GORM Update, Delete and
// Create and a raw UPDATE of line A = (o, 1), while replay is paused,
// leave reads of line B = (o, 2), of the same order, on a replica; line A
// is never read stale, nor through a read pinned by order_id alone.
func checkKeyedComposite(t *testing.T, newEnv func(*testing.T, ...envOpt) *env) {
	e := newEnv(t, keyed)
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

	e.t.Log("step: raw SQL updates line A")
	if err := e.db.Exec("UPDATE order_lines SET name = ? WHERE order_id = ? AND n = ?", "newer", o.String(), 1).Error; err != nil {
		t.Fatal(err)
	}
	e.mustRead(e.lineReads(e.db, o, 1), "newer", "a raw update of line A")
	byOrder("newer", "a raw update of line A")
	untouched("a raw update of line A")

	e.t.Log("step: GORM creates line C")
	if err := e.db.Create(&OrderLine{OrderID: o, N: 3, Name: "created"}).Error; err != nil {
		t.Fatal(err)
	}
	e.mustRead(e.lineReads(e.db, o, 3), "created", "a GORM create of line C")
	untouched("a GORM create of line C")

	e.t.Log("step: GORM deletes line A")
	if err := e.db.Delete(&OrderLine{OrderID: o, N: 1}).Error; err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := e.db.Model(&OrderLine{}).Where(&OrderLine{OrderID: o, N: 1}).Count(&n).Error; err != nil || n != 0 {
		t.Fatalf("STALE READ of line A after its delete: %d rows, %v", n, err)
	}
	untouched("a GORM delete of line A")

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
}

func TestKeyedComposite(t *testing.T)        { checkKeyedComposite(t, newEnv) }
func TestMariaDBKeyedComposite(t *testing.T) { checkKeyedComposite(t, newMariaEnv) }
