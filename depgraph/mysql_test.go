package depgraph

import (
	"context"
	"database/sql"
	"reflect"
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

func TestAnalyzeMySQLSelf(t *testing.T) {
	m := testcluster.MariaDBFor(t)
	db, err := sql.Open("mysql", m.PrimaryDSN(m.CreateDatabase(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range mariaSelfSchema {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	g, err := AnalyzeMySQL(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
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
