package integration_test

import (
	"slices"
	"testing"
	"time"

	"github.com/freshread/freshread/plugin"
)

// Shelf and Book are a many2many pair: GORM reads an association of one
// through the join table with a clause.From.
type Shelf struct {
	ID    uint   `gorm:"primaryKey"`
	Books []Book `gorm:"many2many:shelf_books"`
}

type Book struct {
	ID    uint `gorm:"primaryKey"`
	Title string
}

// TestReadTablesFromClauses: a read waits for every table it reads, also
// those named only in a condition written as text (a subquery) and those
// GORM builds into a clause.From (a many2many association); and, once the
// replicas have replayed those tables, it goes to a replica. With replay
// paused, each read is checked for the data written after the pause. A
// join written as SQL leaves the tables unknown, and is counted.
func TestReadTablesFromClauses(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) {
			e := newEngineEnv(t, engine)
			if err := e.db.AutoMigrate(&Shelf{}, &Book{}); err != nil {
				t.Fatal(err)
			}
			if err := e.db.Create(&Item{ID: 1, Name: "one"}).Error; err != nil {
				t.Fatal(err)
			}
			if err := e.db.Create(&Shelf{ID: 1}).Error; err != nil {
				t.Fatal(err)
			}
			e.resumeAll()
			e.waitReplicaServes(e.db)
			e.pauseAll()

			// Written after the pause: only the primary has them.
			if err := e.db.Create(&Part{ItemID: 1, Label: "p"}).Error; err != nil {
				t.Fatal(err)
			}
			if err := e.db.Model(&Shelf{ID: 1}).Association("Books").Append(&Book{Title: "b"}); err != nil {
				t.Fatal(err)
			}

			textSubquery := func() served {
				var s served
				err := e.db.Model(&Item{}).Select("name, version, "+e.c.portExpr()+" AS port").
					Where("id IN (SELECT item_id FROM parts WHERE label = ?)", "p").Scan(&s).Error
				if err != nil {
					t.Fatalf("read with a text subquery: %v", err)
				}
				return s
			}
			s := textSubquery()
			if s.Name != "one" {
				t.Fatalf("read with a text subquery of a table written after the pause: %+v, want item one (a replica has no such part)", s)
			}
			e.mustPrimary(s, "read with a text subquery")
			if d := e.lastDecision(); !slices.Contains(d.Tables, "parts") {
				t.Fatalf("read with a text subquery: decision %+v does not name parts", d)
			}

			shelfBooks := func() ([]Book, plugin.Decision) {
				var books []Book
				if err := e.db.Model(&Shelf{ID: 1}).Association("Books").Find(&books); err != nil {
					t.Fatalf("association read: %v", err)
				}
				return books, e.lastDecision()
			}
			books, d := shelfBooks()
			if len(books) != 1 || books[0].Title != "b" {
				t.Fatalf("association read after an Append with replay paused: %+v, want the book appended (decision %+v)", books, d)
			}
			if d.Target != plugin.Primary || !slices.Contains(d.Tables, "shelf_books") || !slices.Contains(d.Tables, "books") {
				t.Fatalf("association read: decision %+v, want the primary, for books and shelf_books", d)
			}

			unknownBefore := pluginMetric(t, e.plug, "freshread_reads_unknown_tables_total")
			var n int64
			if err := e.db.Model(&Item{}).Joins("JOIN parts ON parts.item_id = items.id").Count(&n).Error; err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Fatalf("read with a join written as SQL: %d rows, want 1", n)
			}
			if d := e.lastDecision(); d.Tables != nil || d.Target != plugin.Primary {
				t.Fatalf("read with a join written as SQL: decision %+v, want unknown tables on the primary", d)
			}
			if got := pluginMetric(t, e.plug, "freshread_reads_unknown_tables_total"); got != unknownBefore+1 {
				t.Fatalf("freshread_reads_unknown_tables_total went from %v to %v, want one more", unknownBefore, got)
			}

			e.resumeAll()
			if s := e.eventuallyReplica(textSubquery, "read with a text subquery, replicas caught up"); s.Name != "one" {
				t.Fatalf("read with a text subquery on a replica: %+v", s)
			}
			deadline := time.Now().Add(15 * time.Second)
			for {
				books, d := shelfBooks()
				if d.Target == plugin.ReplicaTarget {
					if len(books) != 1 || books[0].Title != "b" {
						t.Fatalf("association read on replica %s: %+v, want the book", d.Replica, books)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("association read never served by a replica within 15 s: last decision %+v", d)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// lastDecision is the plugin's last routing decision.
func (e *env) lastDecision() plugin.Decision {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.decisions) == 0 {
		e.t.Fatal("no routing decision")
	}
	return e.decisions[len(e.decisions)-1]
}
