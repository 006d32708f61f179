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
