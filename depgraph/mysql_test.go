package depgraph

import (
	"context"
	"database/sql"
	"reflect"
	"slices"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// mariaSelfSchema: a self-referencing cascade (a tree of categories), an
// employee's manager set to NULL on delete, a BEFORE trigger that moves
// the key and one that sets another column, a generated unique column, a
// key column ON UPDATE CURRENT_TIMESTAMP, a key-moving trigger on a table
// whose name holds a space, and a plain cascade to another table.
var mariaSelfSchema = []string{
	"CREATE TABLE cat (id INT PRIMARY KEY, parent_id INT, FOREIGN KEY (parent_id) REFERENCES cat (id) ON DELETE CASCADE)",
	"CREATE TABLE emp (id INT PRIMARY KEY, manager_id INT, FOREIGN KEY (manager_id) REFERENCES emp (id) ON DELETE SET NULL)",
	"CREATE TABLE keymove (id INT PRIMARY KEY, v INT)",
	"CREATE TRIGGER keymove_shift BEFORE INSERT ON keymove FOR EACH ROW BEGIN IF NEW.v > 10 THEN SET NEW.`id` = NEW.id + 100; END IF; END",
	"CREATE TABLE stamp (id INT PRIMARY KEY, v INT, note VARCHAR(20))",
	"CREATE TRIGGER stamp_v BEFORE UPDATE ON stamp FOR EACH ROW SET NEW.note = 'it\\'s NEW.id = 1'",
	"CREATE TABLE gen (a INT NOT NULL, k INT AS (a * 10) STORED, UNIQUE KEY (k))",
	"CREATE TABLE gen_plain (id INT PRIMARY KEY, a INT, d INT AS (a * 2) VIRTUAL)",
	"CREATE TABLE ts_key (at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6), v INT, PRIMARY KEY (at))",
	"CREATE TABLE `odd name` (id INT PRIMARY KEY)",
	"CREATE TRIGGER `odd trigger` BEFORE INSERT ON `odd name` FOR EACH ROW SET NEW.id = NEW.id + 1",
	"CREATE TABLE parent (id INT PRIMARY KEY)",
	"CREATE TABLE child (id INT PRIMARY KEY, parent_id INT, FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE)",
}

// analyzeMariaSchema runs schema in a fresh database of the shared MariaDB
// server ({db} names it, {x} another database, dropped at the test's end)
// and returns the graph AnalyzeMySQL reads there.
func analyzeMariaSchema(t *testing.T, schema []string) *Graph {
	t.Helper()
	m := testcluster.MariaDBFor(t)
	name := m.CreateDatabase(t)
	db, err := sql.Open("mysql", m.PrimaryDSN(name))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	t.Cleanup(func() { execMySQL(m.PrimaryDSN(name), "DROP DATABASE IF EXISTS "+name+"_x") })
	names := strings.NewReplacer("{db}", name, "{x}", name+"_x")
	for _, q := range schema {
		if _, err := db.Exec(names.Replace(q)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	g, err := AnalyzeMySQL(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// execMySQL runs one statement on dsn, on a connection of its own.
func execMySQL(dsn, query string) {
	if db, err := sql.Open("mysql", dsn); err == nil {
		db.Exec(query)
		db.Close()
	}
}

func TestAnalyzeMySQLSelf(t *testing.T) {
	g := analyzeMariaSchema(t, mariaSelfSchema)
	got := g.Closed()
	want := map[string][]string{
		"cat":      {"cat"},
		"emp":      {"emp"},
		"keymove":  {"keymove"},
		"gen":      {"gen"},
		"ts_key":   {"ts_key"},
		"odd name": {"odd name"},
		"parent":   {"child"},
	}
	checkClosed(t, got, want)
	if m := g.KeyMoves["stamp"]; !reflect.DeepEqual(m, []string{"note"}) {
		t.Errorf("KeyMoves[stamp] = %v, want [note] (the string's text is no assignment)", m)
	}
	if m := g.KeyMoves["gen_plain"]; !reflect.DeepEqual(m, []string{"d"}) {
		t.Errorf("KeyMoves[gen_plain] = %v, want [d]", m)
	}
}

// mariaCrossSchema: tables of another database ({x}) whose keys move
// unnamed — a BEFORE trigger assigning the key, a generated unique column,
// a key column ON UPDATE CURRENT_TIMESTAMP — and one whose BEFORE trigger
// sets a column in no key; views across the two databases both ways; a
// cascade from this database into the other. The service's own database
// holds none of these tables, so only the other database's catalog says
// they are self-dependent.
var mariaCrossSchema = []string{
	"CREATE DATABASE {x}",
	"CREATE TABLE {x}.km (id INT PRIMARY KEY, v INT)",
	"CREATE TRIGGER {x}.km_shift BEFORE UPDATE ON {x}.km FOR EACH ROW SET NEW.id = OLD.id + 100",
	"CREATE TABLE {x}.kstamp (id INT PRIMARY KEY, note VARCHAR(20))",
	"CREATE TRIGGER {x}.kstamp_note BEFORE INSERT ON {x}.kstamp FOR EACH ROW SET NEW.note = 'stamped'",
	"CREATE TABLE {x}.kgen (a INT NOT NULL, k INT AS (a * 10) PERSISTENT, UNIQUE KEY (k))",
	"CREATE TABLE {x}.kts (at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6), v INT, PRIMARY KEY (at))",
	"CREATE TABLE e (id INT PRIMARY KEY, v INT)",
	"CREATE VIEW {x}.ev AS SELECT id, v FROM {db}.e",
	"CREATE TABLE {x}.f (id INT PRIMARY KEY, v INT)",
	"CREATE VIEW fv AS SELECT id, v FROM {x}.f",
	"CREATE TABLE d (id INT PRIMARY KEY)",
	"CREATE TABLE {x}.q (id INT PRIMARY KEY, d_id INT, FOREIGN KEY (d_id) REFERENCES {db}.d (id) ON UPDATE CASCADE)",
}

// TestAnalyzeMySQLOtherDatabase: the graph reads the keys, generated
// columns and ON UPDATE columns of every database of the server, not only
// the service's: a table of another database whose key moves unnamed is
// self-dependent, one whose BEFORE trigger sets a non-key column is not;
// views and cascades across the databases are edges.
func TestAnalyzeMySQLOtherDatabase(t *testing.T) {
	g := analyzeMariaSchema(t, mariaCrossSchema)
	got := g.Closed()
	for table, want := range map[string][]string{
		"km":   {"km"},
		"kgen": {"kgen"},
		"kts":  {"kts"},
		"e":    {"ev"},
		"f":    {"fv"},
		"fv":   {"f"},
		"ev":   {"e"},
		"d":    {"q"},
	} {
		for _, w := range want {
			if !slices.Contains(got[table], w) {
				t.Errorf("%s -> %v; want %s among them", table, got[table], w)
			}
		}
	}
	for _, table := range []string{"km", "kgen", "kts"} {
		if len(g.SelfReasons[table]) == 0 {
			t.Errorf("%s (another database) is not self-dependent: its key moves without a statement naming it", table)
		}
	}
	if r := g.SelfReasons["kstamp"]; len(r) != 0 {
		t.Errorf("kstamp is self-dependent (%v), but its BEFORE trigger sets no key column", r)
	}
}
