package integration_test

import (
	"errors"
	"strings"
	"testing"

	"gorm.io/gorm"
)

// preparedSession is db with GORM's prepared-statement cache switched on
// by a Session, after the plugin was installed.
func preparedSession(db *gorm.DB) *gorm.DB { return db.Session(&gorm.Session{PrepareStmt: true}) }

// preparedWritePaths are the write paths of writePaths run through a
// prepared Session.
func preparedWritePaths() []writePath {
	var wps []writePath
	for _, wp := range writePaths {
		switch wp.name {
		case "Create", "Update", "Save", "Delete", "Transaction", "NestedTransactionSavepoint", "BeginCommit", "Exec", "Association", "CreateInBatches":
		default:
			continue
		}
		write := wp.write
		wp.write = func(db *gorm.DB, id uint) error { return write(preparedSession(db), id) }
		wps = append(wps, wp)
	}
	return wps
}

// TestPreparedSessionWritePaths: with gorm.Session{PrepareStmt: true}
// taken after db.Use (on PostgreSQL the plugin's transactions fold their
// COMMIT), every write path commits, publishes, and the next read of what
// it wrote is fresh with every replica paused; on both engines.
func TestPreparedSessionWritePaths(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) {
			for i, wp := range preparedWritePaths() {
				t.Run(wp.name, func(t *testing.T) {
					e := newEngineEnv(t, engine)
					runWritePath(t, e, wp, uint(i+1))
				})
			}
		})
	}
}

// TestPreparedStmtCombinations runs the sequences that crashed GORM's own
// prepared-statement tests, for every way the cache and the plugin meet:
// the cache made at Open (gorm.Config.PrepareStmt, before db.Use) or by a
// Session after it, a Session inside a transaction, nested transactions,
// statements cached by one transaction and run by the next, and a
// statement run in a transaction that already failed; with Redis as the
// store too, where writes are tagged. Each checks the
// data on the primary and that a read after the commit, with every replica
// paused, is fresh.
func TestPreparedStmtCombinations(t *testing.T) {
	type setup struct {
		name string
		env  func(t *testing.T) *env
		// db is the handle the sequences use.
		db func(e *env) *gorm.DB
	}
	setups := []setup{
		{"postgres/session", func(t *testing.T) *env { return newEnv(t) }, func(e *env) *gorm.DB { return preparedSession(e.db) }},
		{"postgres/config", func(t *testing.T) *env { return newEnv(t, withPrepareStmt()) }, func(e *env) *gorm.DB { return e.db }},
		{"postgres/config+session", func(t *testing.T) *env { return newEnv(t, withPrepareStmt()) }, func(e *env) *gorm.DB { return preparedSession(e.db) }},
		// With Redis, writes are tagged (writer tags): the cache made at
		// Open keeps *sql.Tx transactions and pins autocommit writes.
		{"postgres/config+redis", func(t *testing.T) *env { return newEnv(t, withPrepareStmt(), withRedis(t)) }, func(e *env) *gorm.DB { return e.db }},
		{"mariadb/session", func(t *testing.T) *env { return newMariaEnv(t) }, func(e *env) *gorm.DB { return preparedSession(e.db) }},
		{"mariadb/config", func(t *testing.T) *env { return newMariaEnv(t, withPrepareStmt()) }, func(e *env) *gorm.DB { return e.db }},
	}
	sequences := []struct {
		name string
		// run writes item id's name "new" (and may do more).
		run func(t *testing.T, db *gorm.DB, id uint) error
	}{
		{"create then update", func(t *testing.T, db *gorm.DB, id uint) error {
			if err := db.Create(&Item{ID: id + 100, Name: "x"}).Error; err != nil {
				return err
			}
			return setName(db, id)
		}},
		{"statements cached by one transaction run in the next", func(t *testing.T, db *gorm.DB, id uint) error {
			for range 3 {
				if err := db.Transaction(func(tx *gorm.DB) error {
					var it Item
					if err := tx.First(&it, id).Error; err != nil {
						return err
					}
					return tx.Model(&Item{ID: id}).Update("version", it.Version+1).Error
				}); err != nil {
					return err
				}
			}
			return db.Transaction(func(tx *gorm.DB) error { return setName(tx, id) })
		}},
		{"statements cached outside a transaction run in one", func(t *testing.T, db *gorm.DB, id uint) error {
			var it Item
			if err := db.Session(&gorm.Session{SkipDefaultTransaction: true}).Model(&Item{ID: id}).Update("version", 5).Error; err != nil {
				return err
			}
			if err := db.First(&it, id).Error; err != nil {
				return err
			}
			return db.Transaction(func(tx *gorm.DB) error {
				if err := tx.First(&it, id).Error; err != nil {
					return err
				}
				if err := tx.Session(&gorm.Session{SkipDefaultTransaction: true}).Model(&Item{ID: id}).Update("version", 6).Error; err != nil {
					return err
				}
				return setName(tx, id)
			})
		}},
		{"prepared session inside a transaction", func(t *testing.T, db *gorm.DB, id uint) error {
			return db.Transaction(func(tx *gorm.DB) error { return setName(preparedSession(tx), id) })
		}},
		{"nested transactions", func(t *testing.T, db *gorm.DB, id uint) error {
			return db.Transaction(func(tx *gorm.DB) error {
				_ = tx.Transaction(func(tx2 *gorm.DB) error {
					if err := tx2.Model(&Item{ID: id}).Update("name", "rolled-back").Error; err != nil {
						return err
					}
					return errors.New("roll back to the savepoint")
				})
				return tx.Transaction(func(tx2 *gorm.DB) error {
					return preparedSession(tx2).Transaction(func(tx3 *gorm.DB) error { return setName(tx3, id) })
				})
			})
		}},
		{"begin, commit", func(t *testing.T, db *gorm.DB, id uint) error {
			tx := db.Begin()
			if err := setName(tx, id); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit().Error
		}},
		{"a statement in a failed transaction fails as on the primary", func(t *testing.T, db *gorm.DB, id uint) error {
			// Cache the update's statement first, so that the failed
			// transaction runs a statement prepared elsewhere.
			if err := setName(db, id); err != nil {
				return err
			}
			err := db.Transaction(func(tx *gorm.DB) error {
				if err := tx.Exec("SELECT no_such_column FROM items").Error; err == nil {
					t.Error("a query of a missing column succeeded")
				}
				return setName(tx, id)
			})
			if strings.Contains(t.Name(), "postgres") && (err == nil || !strings.Contains(err.Error(), "current transaction is aborted")) {
				t.Errorf("the statement after the failure: %v, want PostgreSQL's \"current transaction is aborted\"", err)
			}
			return nil
		}},
	}
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			for i, seq := range sequences {
				t.Run(seq.name, func(t *testing.T) {
					e := s.env(t)
					id := uint(i + 1)
					if err := e.db.Create(&Item{ID: id, Name: "old", Version: 1}).Error; err != nil {
						t.Fatal(err)
					}
					e.resumeAll()
					e.pauseAll()
					if err := seq.run(t, s.db(e), id); err != nil {
						t.Fatalf("%s: %v", seq.name, err)
					}
					got := e.readItem(e.db, id)
					if got.Name != "new" {
						t.Fatalf("STALE READ with replay paused: %+v", got)
					}
					e.mustPrimary(got, "read of the written item")
					if again := e.readItem(s.db(e), id); again.Name != "new" {
						t.Fatalf("STALE READ through the prepared handle: %+v", again)
					}
					e.waitNoConnInUse()
				})
			}
		})
	}
}
