package integration_test

import (
	"testing"

	"gorm.io/gorm"
)

// counted is a count with the port of the server that produced it.
type counted struct {
	N    int
	Name string
	Port int
}

func (e *env) count(db *gorm.DB, query string) counted {
	e.t.Helper()
	var c counted
	if err := db.Raw(query).Scan(&c).Error; err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
	return c
}

// checkLearnedDependentsNeverReadStale: the plugin learns triggers,
// cascading foreign keys and views from the catalog (at start, after each
// schema change it runs, and every 30 s), so the tables they write are read
// fresh. schema creates, through the plugin, audit (written by a trigger
// on items whose body has IF … END IF), parents and children (ON DELETE
// CASCADE) and the view item_names over items, with parent 1 and child 1.
// With the replicas stopped: an UPDATE of items, a DELETE of the parent.
// audit, the view and children are read fresh from the primary, by this
// plugin and by one started after the schema; an untouched table from a
// replica; audit from a replica after catch-up.
// auditRow is a row of the audit table the test's trigger writes.
type auditRow struct {
	ID   int `gorm:"primaryKey"`
	Note string
}

func (auditRow) TableName() string { return "audit" }

func checkLearnedDependentsNeverReadStale(t *testing.T, e *env, schema []string) {
	t.Helper()
	for _, q := range schema {
		if err := e.db.Exec(q).Error; err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	started, _ := e.open()
	e.pauseAll()
	db := e.db

	if err := setName(db, 1); err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("DELETE FROM parents WHERE id = 1").Error; err != nil {
		t.Fatal(err)
	}
	port := e.c.portExpr()
	audit := e.count(db, "SELECT COUNT(*) AS n, "+port+" AS port FROM audit")
	if audit.N != 1 {
		t.Fatalf("STALE READ of the table the trigger writes: %d audit rows, want 1 (port %d)", audit.N, audit.Port)
	}
	e.mustPrimary(served{Port: audit.Port}, "read of audit, written by the trigger")
	var row auditRow
	if err := db.First(&row, 1).Error; err != nil || row.Note == "" {
		t.Fatalf("STALE READ of audit's row 1 through GORM by key: %+v, %v", row, err)
	}
	view := e.count(db, "SELECT name, "+port+" AS port FROM item_names WHERE id = 1")
	if view.Name != "new" {
		t.Fatalf("STALE READ through the view: %+v", view)
	}
	e.mustPrimary(served{Port: view.Port}, "read of the view over items")
	children := e.count(db, "SELECT COUNT(*) AS n, "+port+" AS port FROM children")
	if children.N != 0 {
		t.Fatalf("STALE READ of the cascaded child: %d rows, want 0 (port %d)", children.N, children.Port)
	}
	e.mustPrimary(served{Port: children.Port}, "read of children, cascaded")
	e.mustReplica(e.readOther(db), "read of an untouched table")
	if n := e.count(started, "SELECT COUNT(*) AS n, "+port+" AS port FROM audit"); n.N != 1 || n.Port != e.c.primaryPort() {
		t.Fatalf("a plugin started after the schema: %+v, want 1 audit row from the primary", n)
	}

	e.resumeAll()
	e.eventuallyReplica(func() served {
		audit = e.count(db, "SELECT COUNT(*) AS n, "+port+" AS port FROM audit")
		if audit.N != 1 {
			t.Fatalf("after catch-up: %d audit rows", audit.N)
		}
		return served{Port: audit.Port}
	}, "read of audit after catch-up")
}

// TestLearnedDependentsNeverReadStale: on PostgreSQL, without a tracker
// daemon, the plugin runs the tracker's catalog analysis itself.
func TestLearnedDependentsNeverReadStale(t *testing.T) {
	checkLearnedDependentsNeverReadStale(t, newEnv(t), pgDependentsSchema)
}

// TestKeyedLearnedDependentsNeverReadStale: the same with keyed positions:
// the trigger's, the cascade's and the view's writes are unkeyed, which
// every keyed read (here of audit's row by key) waits for.
func TestKeyedLearnedDependentsNeverReadStale(t *testing.T) {
	checkLearnedDependentsNeverReadStale(t, newEnv(t, keyed), pgDependentsSchema)
}

func TestMariaDBKeyedLearnedDependentsNeverReadStale(t *testing.T) {
	checkLearnedDependentsNeverReadStale(t, newMariaEnv(t, keyed), mariaDependentsSchema)
}

var pgDependentsSchema = []string{
	"CREATE TABLE audit (id serial PRIMARY KEY, note text)",
	`CREATE FUNCTION items_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.name <> OLD.name THEN
    INSERT INTO audit (note) VALUES ('renamed ' || NEW.id); -- a comment naming others
  END IF;
  RETURN NEW;
END $$`,
	"CREATE TRIGGER items_audit AFTER UPDATE ON items FOR EACH ROW EXECUTE FUNCTION items_audit()",
	"CREATE TABLE parents (id int PRIMARY KEY)",
	"CREATE TABLE children (id int PRIMARY KEY, parent_id int REFERENCES parents (id) ON DELETE CASCADE)",
	"CREATE VIEW item_names AS SELECT id, name FROM items",
	"INSERT INTO parents VALUES (1)",
	"INSERT INTO children VALUES (1, 1)",
}

// TestMariaDBLearnedDependentsNeverReadStale: on MariaDB the plugin reads
// information_schema; the trigger body is BEGIN … IF … END.
func TestMariaDBLearnedDependentsNeverReadStale(t *testing.T) {
	checkLearnedDependentsNeverReadStale(t, newMariaEnv(t), mariaDependentsSchema)
}

var mariaDependentsSchema = []string{
	"CREATE TABLE audit (id INT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(100))",
	`CREATE TRIGGER items_audit AFTER UPDATE ON items FOR EACH ROW
BEGIN
  IF NEW.name <> OLD.name THEN
    INSERT INTO audit (note) VALUES (CONCAT('renamed ', NEW.id)); -- a comment naming others
  END IF;
END`,
	"CREATE TABLE parents (id INT PRIMARY KEY)",
	"CREATE TABLE children (id INT PRIMARY KEY, parent_id INT, FOREIGN KEY (parent_id) REFERENCES parents (id) ON DELETE CASCADE)",
	"CREATE VIEW item_names AS SELECT id, name FROM items",
	"INSERT INTO parents VALUES (1)",
	"INSERT INTO children VALUES (1, 1)",
}
