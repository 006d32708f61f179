package integration_test

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/freshread/freshread/plugin"
)

// Rows a write changes without naming them, with the default Config
// (positions by key): a partition or inheritance child written through
// its parent and the reverse, a row moved between partitions, a table
// whose trigger, rule or self-referencing foreign key writes other rows of
// itself, a key moved by a BEFORE trigger or a generated column, and
// MariaDB's partition exchanged with a table. Each case: its rows
// replicated, every replica paused, ONE write through the plugin, then the
// affected row read by its own key through db.Table, raw SQL and (where
// the key is id) a model, by the writing process and by a second one
// sharing the Redis store. The replica is checked to hold the old row, so
// a read that went there would fail the case.

// unnamedCase is one write and the row it changes without naming it.
type unnamedCase struct {
	name  string
	write string
	table string // the table read
	key   string // its key column
	id    any    // the key read
	want  string // column v of that row after the write; "" for no row
}

// countsRows: a case reading a table expression with history (MariaDB's
// FOR SYSTEM_TIME ALL) reads the number of rows with the key, by raw SQL
// only, instead of column v.
func (c unnamedCase) countsRows() bool { return strings.Contains(c.table, " FOR SYSTEM_TIME ") }

// kvRow is the model read of the cases' tables (key id, value v).
type kvRow struct {
	ID int `gorm:"primaryKey"`
	V  sql.NullString
}

var pgUnnamedSchema = []string{
	"CREATE TABLE ev (id int, region text, v text, PRIMARY KEY (id, region)) PARTITION BY LIST (region)",
	"CREATE TABLE ev_eu PARTITION OF ev FOR VALUES IN ('eu')",
	"CREATE TABLE ev_us PARTITION OF ev FOR VALUES IN ('us') PARTITION BY RANGE (id)",
	"CREATE TABLE ev_us_low PARTITION OF ev_us FOR VALUES FROM (0) TO (1000)",
	"INSERT INTO ev VALUES (1, 'eu', 'old'), (2, 'eu', 'old'), (3, 'eu', 'old'), (4, 'us', 'old')",
	"CREATE TABLE base (id int PRIMARY KEY, v text)",
	"CREATE TABLE sub () INHERITS (base)",
	"INSERT INTO sub VALUES (10, 'old'), (11, 'old')",
	"CREATE TABLE cat (id int PRIMARY KEY, v int REFERENCES cat (id) ON DELETE CASCADE)",
	"INSERT INTO cat VALUES (1, NULL), (2, 1)",
	"CREATE TABLE emp (id int PRIMARY KEY, v int REFERENCES emp (id) ON DELETE SET NULL)",
	"INSERT INTO emp VALUES (1, NULL), (2, 1)",
	"CREATE TABLE node (id int PRIMARY KEY, v int REFERENCES node (id) ON UPDATE CASCADE)",
	"INSERT INTO node VALUES (1, NULL), (2, 1)",
	"CREATE TABLE tree (id int PRIMARY KEY, v text)",
	`CREATE FUNCTION tree_next() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE tree SET v = 'touched by ' || NEW.id WHERE id = NEW.id + 1;
  RETURN NULL;
END $$`,
	"CREATE TRIGGER tree_next AFTER UPDATE ON tree FOR EACH ROW WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION tree_next()",
	"INSERT INTO tree VALUES (1, 'old'), (2, 'old')",
	"CREATE TABLE rs (id int PRIMARY KEY, v text)",
	"CREATE RULE rs_next AS ON INSERT TO rs DO ALSO UPDATE rs SET v = 'ruled' WHERE id = NEW.id + 1",
	"INSERT INTO rs VALUES (6, 'old')",
	"CREATE TABLE keymove (id int PRIMARY KEY, v text)",
	`CREATE FUNCTION keymove_shift() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.id := NEW.id + 100;
  RETURN NEW;
END $$`,
	"CREATE TRIGGER keymove_shift BEFORE INSERT ON keymove FOR EACH ROW EXECUTE FUNCTION keymove_shift()",
	"CREATE TABLE gen (a int NOT NULL, k int GENERATED ALWAYS AS (a * 10) STORED PRIMARY KEY, v text)",
	"INSERT INTO gen (a, v) VALUES (1, 'one')",
	"CREATE TABLE ping (id int PRIMARY KEY, v text)",
	"CREATE TABLE pong (id int PRIMARY KEY, v text)",
	`CREATE FUNCTION ping_pong() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_TABLE_NAME = 'ping' THEN
    UPDATE pong SET v = NEW.v WHERE id = NEW.id;
  ELSE
    UPDATE ping SET v = 'back from pong ' || NEW.id WHERE id = NEW.id + 1;
  END IF;
  RETURN NULL;
END $$`,
	"CREATE TRIGGER ping_pong AFTER UPDATE ON ping FOR EACH ROW WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION ping_pong()",
	"CREATE TRIGGER pong_ping AFTER UPDATE ON pong FOR EACH ROW WHEN (pg_trigger_depth() < 2) EXECUTE FUNCTION ping_pong()",
	"INSERT INTO ping VALUES (1, 'old'), (2, 'old')",
	"INSERT INTO pong VALUES (1, 'old')",
	"CREATE TABLE tp (id int, r text, v text, PRIMARY KEY (id, r)) PARTITION BY LIST (r)",
	"CREATE TABLE tp_a PARTITION OF tp FOR VALUES IN ('a')",
	"CREATE TABLE tq (id int, r text, v text, PRIMARY KEY (id, r)) PARTITION BY LIST (r)",
	"CREATE TABLE tq_a PARTITION OF tq FOR VALUES IN ('a')",
	"INSERT INTO tp VALUES (1, 'a', 'old')",
	"INSERT INTO tq VALUES (1, 'a', 'old')",
	"CREATE TABLE mg (id int PRIMARY KEY, v text)",
	"INSERT INTO mg VALUES (1, 'old')",
	"CREATE TABLE mvbase (id int PRIMARY KEY, v text)",
	"INSERT INTO mvbase VALUES (1, 'old')",
	"CREATE MATERIALIZED VIEW mv AS SELECT id, v FROM mvbase",
	"UPDATE mvbase SET v = 'refreshed' WHERE id = 1",
	"CREATE TABLE cte_p (id int, r text, v text, PRIMARY KEY (id, r)) PARTITION BY LIST (r)",
	"CREATE TABLE cte_p_a PARTITION OF cte_p FOR VALUES IN ('a')",
	"INSERT INTO cte_p VALUES (1, 'a', 'old')",
	"CREATE TABLE trp (id int PRIMARY KEY, v text)",
	"CREATE TABLE trc (id int PRIMARY KEY, v text, p int REFERENCES trp (id))",
	"INSERT INTO trp VALUES (1, 'old')",
	"INSERT INTO trc VALUES (1, 'old', 1)",
	"CREATE TABLE cp (id int PRIMARY KEY, v text)",
	"INSERT INTO cp VALUES (4, 'old')",
	// A foreign table whose server is this database (postgres_fdw).
	"CREATE EXTENSION IF NOT EXISTS postgres_fdw",
	"DO $$BEGIN EXECUTE format('CREATE SERVER loopback FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host %L, port %L, dbname %L)', '127.0.0.1', inet_server_port()::text, current_database()); END$$",
	"DO $$BEGIN EXECUTE format('CREATE USER MAPPING FOR CURRENT_USER SERVER loopback OPTIONS (user %L)', current_user); END$$",
	"CREATE TABLE fr (id int PRIMARY KEY, v text)",
	"INSERT INTO fr VALUES (20, 'old')",
	"CREATE FOREIGN TABLE ft (id int, v text) SERVER loopback OPTIONS (table_name 'fr')",
	// Keys named in shapes a keyed raise must read right.
	"CREATE TABLE ks (id int PRIMARY KEY, v text)",
	"INSERT INTO ks SELECT g, 'old' FROM generate_series(1, 20) g",
	"UPDATE ks SET v = 'x' WHERE id = 11",
}

var pgUnnamedCases = []unnamedCase{
	{"a write through the parent, read through the partition", "UPDATE ev SET v = 'new' WHERE id = 1", "ev_eu", "id", 1, "new"},
	{"a write through the partition, read through the parent", "UPDATE ev_eu SET v = 'new' WHERE id = 2", "ev", "id", 2, "new"},
	{"a row moved to another partition, read there", "UPDATE ev SET region = 'us', v = 'moved' WHERE id = 3", "ev_us_low", "id", 3, "moved"},
	{"a row moved to another partition, read where it was", "UPDATE ev SET region = 'eu' WHERE id = 4", "ev_us", "id", 4, ""},
	{"an inheritance child written through its parent", "UPDATE base SET v = 'new' WHERE id = 10", "sub", "id", 10, "new"},
	{"an inheritance parent read after a write to its child", "UPDATE sub SET v = 'new' WHERE id = 11", "base", "id", 11, "new"},
	{"a self-referencing ON DELETE CASCADE", "DELETE FROM cat WHERE id = 1", "cat", "id", 2, ""},
	{"a self-referencing ON DELETE SET NULL", "DELETE FROM emp WHERE id = 1", "emp", "id", 2, "null"},
	{"a self-referencing ON UPDATE CASCADE", "UPDATE node SET id = 100 WHERE id = 1", "node", "id", 2, "100"},
	{"a trigger writing another row of its table", "UPDATE tree SET v = 'new' WHERE id = 1", "tree", "id", 2, "touched by 1"},
	{"a rule writing another row of its table", "INSERT INTO rs VALUES (5, 'new')", "rs", "id", 6, "ruled"},
	{"a BEFORE trigger moving the key", "INSERT INTO keymove VALUES (7, 'new')", "keymove", "id", 107, "new"},
	{"a generated primary key moved by its column", "UPDATE gen SET a = 2 WHERE k = 10", "gen", "k", 20, "one"},
	{"triggers of two tables writing back into the first", "UPDATE ping SET v = 'new' WHERE id = 1", "ping", "id", 2, "back from pong 1"},
	{"TRUNCATE of a partition, read through the parent", "TRUNCATE tp_a", "tp", "id", 1, ""},
	{"TRUNCATE of a parent, read through the partition", "TRUNCATE tq", "tq_a", "id", 1, ""},
	{"MERGE", "MERGE INTO mg USING (VALUES (1, 'new')) AS s (id, v) ON mg.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v", "mg", "id", 1, "new"},
	{"REFRESH MATERIALIZED VIEW", "REFRESH MATERIALIZED VIEW mv", "mv", "id", 1, "refreshed"},
	{"a writing CTE through a partitioned parent", "WITH u AS (UPDATE cte_p SET v = 'new' WHERE id = 1 RETURNING id) SELECT count(*) FROM u", "cte_p_a", "id", 1, "new"},
	// TRUNCATE ... CASCADE empties every table whose foreign key references
	// the table, with or without ON DELETE CASCADE.
	{"TRUNCATE ... CASCADE of a referenced table, read on the referencing one", "TRUNCATE trp CASCADE", "trc", "id", 1, ""},
	{"rows loaded by COPY", "COPY cp (id, v) FROM PROGRAM 'echo 5,new' WITH (FORMAT csv)", "cp", "id", 5, "new"},
	{"a write through a foreign table into a table of this database", "UPDATE ft SET v = 'new' WHERE id = 20", "fr", "id", 20, "new"},
	{"a key moved by the statement, read at the new key", "UPDATE ks SET id = 50 WHERE id = 3", "ks", "id", 50, "old"},
	{"a key moved by an expression, read at the new key", "UPDATE ks SET id = id + 100 WHERE id = 4", "ks", "id", 104, "old"},
	{"rows inserted from a SELECT of the same table", "INSERT INTO ks SELECT id + 200, 'copied' FROM ks WHERE id = 5", "ks", "id", 205, "copied"},
	{"a key from a joined VALUES list", "UPDATE ks SET v = 'new' FROM (VALUES (6)) AS x (i) WHERE ks.id = x.i", "ks", "id", 6, "new"},
	{"a key from a subquery", "DELETE FROM ks WHERE id IN (SELECT 7)", "ks", "id", 7, ""},
	{"a key in an array", "UPDATE ks SET v = 'new' WHERE id = ANY (ARRAY[8])", "ks", "id", 8, "new"},
	{"a key compared through a cast", "UPDATE ks SET v = 'new' WHERE id::text = '9'", "ks", "id", 9, "new"},
	{"a key OR another column", "UPDATE ks SET v = 'new' WHERE id = 10 OR v = 'x'", "ks", "id", 11, "new"},
	{"a negated key inequality", "UPDATE ks SET v = 'new' WHERE NOT (id <> 12)", "ks", "id", 12, "new"},
	{"a key range", "UPDATE ks SET v = 'new' WHERE id BETWEEN 13 AND 14", "ks", "id", 14, "new"},
	{"a key OR a key compared with itself", "UPDATE ks SET v = 'new' WHERE id = 15 OR id = id + 0 AND id > 15 AND id < 17", "ks", "id", 16, "new"},
}

func TestRowsUnnamedNeverReadStale(t *testing.T) {
	checkRowsUnnamed(t, "postgres", pgUnnamedSchema, pgUnnamedCases)
}

var mariaUnnamedSchema = []string{
	"CREATE TABLE cat (id INT PRIMARY KEY, v INT, FOREIGN KEY (v) REFERENCES cat (id) ON DELETE CASCADE)",
	"INSERT INTO cat VALUES (1, NULL), (2, 1)",
	"CREATE TABLE emp (id INT PRIMARY KEY, v INT, FOREIGN KEY (v) REFERENCES emp (id) ON DELETE SET NULL)",
	"INSERT INTO emp VALUES (1, NULL), (2, 1)",
	"CREATE TABLE keymove (id INT PRIMARY KEY, v VARCHAR(20))",
	"CREATE TRIGGER keymove_shift BEFORE INSERT ON keymove FOR EACH ROW SET NEW.id = NEW.id + 100",
	"CREATE TABLE keyupd (id INT PRIMARY KEY, v VARCHAR(20))",
	"CREATE TRIGGER keyupd_shift BEFORE UPDATE ON keyupd FOR EACH ROW BEGIN IF NEW.v = 'move' THEN SET NEW.`id` = OLD.id + 100; END IF; END",
	"INSERT INTO keyupd VALUES (8, 'old')",
	"CREATE TABLE gen (a INT NOT NULL, k INT AS (a * 10) PERSISTENT, v VARCHAR(20), UNIQUE KEY (k))",
	"INSERT INTO gen (a, v) VALUES (1, 'one')",
	"CREATE TABLE ep (id INT PRIMARY KEY, v VARCHAR(20)) PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (100), PARTITION p1 VALUES LESS THAN MAXVALUE)",
	"CREATE TABLE ex (id INT PRIMARY KEY, v VARCHAR(20))",
	"INSERT INTO ep VALUES (1, 'was in ep')",
	"INSERT INTO ex VALUES (2, 'was in ex')",
	"CREATE TABLE vt (id INT PRIMARY KEY, v VARCHAR(20)) WITH SYSTEM VERSIONING",
	"INSERT INTO vt VALUES (1, 'first')",
	"UPDATE vt SET v = 'second' WHERE id = 1",
	"CREATE TABLE an (id INT PRIMARY KEY, v VARCHAR(20))",
	"INSERT INTO an VALUES (1, 'old'), (2, 'old')",
	// Keys named in shapes a keyed raise must read right.
	"CREATE TABLE kx (id INT PRIMARY KEY, v VARCHAR(20))",
	"CREATE TABLE ky (id INT PRIMARY KEY, v VARCHAR(20))",
	"INSERT INTO kx SELECT seq, 'old' FROM seq_1_to_10",
	"INSERT INTO ky SELECT seq, 'old' FROM seq_1_to_10",
}

var mariaUnnamedCases = []unnamedCase{
	{"a self-referencing ON DELETE CASCADE", "DELETE FROM cat WHERE id = 1", "cat", "id", 2, ""},
	{"a self-referencing ON DELETE SET NULL", "DELETE FROM emp WHERE id = 1", "emp", "id", 2, "null"},
	{"a BEFORE INSERT trigger moving the key", "INSERT INTO keymove VALUES (7, 'new')", "keymove", "id", 107, "new"},
	{"a BEFORE UPDATE trigger moving the key", "UPDATE keyupd SET v = 'move' WHERE id = 8", "keyupd", "id", 108, "move"},
	{"a generated key column (Config.KeyColumns) moved by its column", "UPDATE gen SET a = 2 WHERE k = 10", "gen", "k", 20, "one"},
	{"a partition exchanged with a table", "ALTER TABLE ep EXCHANGE PARTITION p0 WITH TABLE ex", "ex", "id", 1, "was in ep"},
	{"DELETE HISTORY of a system-versioned table", "DELETE HISTORY FROM vt", "vt FOR SYSTEM_TIME ALL", "id", 1, "1"},
	// MariaDB's ANALYZE runs the statement it shows the plan of.
	{"ANALYZE UPDATE", "ANALYZE UPDATE an SET v = 'new' WHERE id = 1", "an", "id", 1, "new"},
	{"ANALYZE FORMAT=JSON DELETE", "ANALYZE FORMAT=JSON DELETE FROM an WHERE id = 2", "an", "id", 2, ""},
	{"a multi-table UPDATE writing the joined table", "UPDATE kx JOIN ky ON kx.id = ky.id SET ky.v = 'new' WHERE kx.id = 1", "ky", "id", 1, "new"},
	{"a multi-table DELETE of the joined table", "DELETE ky FROM kx JOIN ky ON kx.id = ky.id WHERE kx.id = 2", "ky", "id", 2, ""},
	{"an upsert moving the key", "INSERT INTO ky VALUES (3, 'x') ON DUPLICATE KEY UPDATE id = 30", "ky", "id", 30, "old"},
	{"REPLACE", "REPLACE INTO ky VALUES (4, 'new')", "ky", "id", 4, "new"},
	{"a key moved by an expression", "UPDATE ky SET id = id + 100 WHERE id = 5", "ky", "id", 105, "old"},
	{"UPDATE ... ORDER BY ... LIMIT", "UPDATE ky SET v = 'new' WHERE id > 6 ORDER BY id LIMIT 1", "ky", "id", 7, "new"},
	{"rows inserted from a SELECT of another table", "INSERT INTO ky SELECT id + 200, 'copied' FROM kx WHERE id = 8", "ky", "id", 208, "copied"},
}

func TestMariaDBRowsUnnamedNeverReadStale(t *testing.T) {
	checkRowsUnnamed(t, "mariadb", mariaUnnamedSchema, mariaUnnamedCases)
}

// A model's primary key the catalog does not hold as a key: the tables
// have no primary key and no unique index, and kvRow declares id their
// primary key, so a process keys them by id once a model read has shown
// it. A BEFORE UPDATE trigger that sets NEW.id, and a generated id, move
// a row to another id than the statement names. Each table's first case
// changes no key: its model reads teach both processes the key, so the
// raw UPDATE of the second case is keyed by id unless the plugin finds id
// can move.
var pgModelKeySchema = []string{
	"CREATE TABLE nk (id int NOT NULL, v text)",
	`CREATE FUNCTION nk_shift() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.v = 'move' THEN
    NEW.id := OLD.id + 100;
  END IF;
  RETURN NEW;
END $$`,
	"CREATE TRIGGER nk_shift BEFORE UPDATE ON nk FOR EACH ROW EXECUTE FUNCTION nk_shift()",
	"INSERT INTO nk VALUES (1, 'old'), (2, 'old')",
	"CREATE TABLE nkgen (a int NOT NULL, id int GENERATED ALWAYS AS (a * 10) STORED, v text)",
	"INSERT INTO nkgen (a, v) VALUES (1, 'one'), (3, 'three')",
}

var mariaModelKeySchema = []string{
	"CREATE TABLE nk (id INT NOT NULL, v VARCHAR(20))",
	"CREATE TRIGGER nk_shift BEFORE UPDATE ON nk FOR EACH ROW BEGIN IF NEW.v = 'move' THEN SET NEW.id = OLD.id + 100; END IF; END",
	"INSERT INTO nk VALUES (1, 'old'), (2, 'old')",
	"CREATE TABLE nkgen (a INT NOT NULL, id INT AS (a * 10) PERSISTENT, v VARCHAR(20))",
	"INSERT INTO nkgen (a, v) VALUES (1, 'one'), (3, 'three')",
}

var modelKeyCases = []unnamedCase{
	{"a model's key the catalog does not hold, not moved", "UPDATE nk SET v = 'new' WHERE id = 1", "nk", "id", 1, "new"},
	{"a BEFORE UPDATE trigger moving a model's key the catalog does not hold", "UPDATE nk SET v = 'move' WHERE id = 2", "nk", "id", 102, "move"},
	{"a generated model key the catalog does not hold, not moved", "UPDATE nkgen SET v = 'new' WHERE id = 30", "nkgen", "id", 30, "new"},
	{"a generated model key the catalog does not hold, moved by its column", "UPDATE nkgen SET a = 2 WHERE id = 10", "nkgen", "id", 20, "one"},
}

func TestRowsUnnamedModelKeyNeverReadStale(t *testing.T) {
	checkRowsUnnamed(t, "postgres", pgModelKeySchema, modelKeyCases)
}

func TestMariaDBRowsUnnamedModelKeyNeverReadStale(t *testing.T) {
	checkRowsUnnamed(t, "mariadb", mariaModelKeySchema, modelKeyCases)
}

// The same across two databases of one MariaDB server ({x} is the other
// one, made by the test): a trigger in the service's database writing a
// table of the other, a trigger in the other writing the service's; a
// foreign key into the other that cascades back, and one of the other's
// tables cascading from the service's; a view in each database over the
// other's table, read after a write to that table and written through;
// a procedure and a function of the other database writing the service's
// table, and a procedure of the service's writing the other's, each called
// from the service's database. The service reads the other database's
// tables and views by their qualified names.
var mariaCrossSchema = []string{
	"CREATE DATABASE {x}",
	"CREATE TABLE {x}.t (id INT PRIMARY KEY, v VARCHAR(20))",
	"INSERT INTO {x}.t VALUES (1, 'old')",
	"CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))",
	"INSERT INTO a VALUES (1, 'old')",
	"CREATE TRIGGER a_to_t AFTER UPDATE ON a FOR EACH ROW UPDATE {x}.t SET v = NEW.v WHERE id = NEW.id",
	"CREATE TABLE b (id INT PRIMARY KEY, v VARCHAR(20))",
	"INSERT INTO b VALUES (2, 'old')",
	"CREATE TABLE {x}.w (id INT PRIMARY KEY, v VARCHAR(20))",
	"INSERT INTO {x}.w VALUES (2, 'old')",
	"CREATE TRIGGER {x}.w_to_b AFTER UPDATE ON {x}.w FOR EACH ROW UPDATE {db}.b SET v = NEW.v WHERE id = NEW.id",
	"CREATE TABLE {x}.p (id INT PRIMARY KEY)",
	"INSERT INTO {x}.p VALUES (3)",
	"CREATE TABLE c (id INT PRIMARY KEY, v INT, FOREIGN KEY (v) REFERENCES {x}.p (id) ON DELETE CASCADE)",
	"INSERT INTO c VALUES (3, 3)",
	"CREATE TABLE d (id INT PRIMARY KEY)",
	"INSERT INTO d VALUES (4)",
	"CREATE TABLE {x}.q (id INT PRIMARY KEY, v INT, FOREIGN KEY (v) REFERENCES {db}.d (id) ON UPDATE CASCADE)",
	"INSERT INTO {x}.q VALUES (4, 4)",
	"CREATE TABLE e (id INT PRIMARY KEY, v VARCHAR(20))",
	"INSERT INTO e VALUES (5, 'old'), (6, 'old')",
	"CREATE VIEW {x}.ev AS SELECT id, v FROM {db}.e",
	"CREATE TABLE {x}.f (id INT PRIMARY KEY, v VARCHAR(20))",
	"INSERT INTO {x}.f VALUES (7, 'old'), (8, 'old')",
	"CREATE VIEW fv AS SELECT id, v FROM {x}.f",
	"CREATE TABLE g (id INT PRIMARY KEY, v VARCHAR(20))",
	"INSERT INTO g VALUES (9, 'old'), (10, 'old'), (11, 'old')",
	"CREATE PROCEDURE {x}.pr(i INT) UPDATE {db}.g SET v = 'by procedure' WHERE id = i",
	// DETERMINISTIC: the binary log refuses a function that writes without it
	// (or log_bin_trust_function_creators).
	"CREATE FUNCTION {x}.fn(i INT) RETURNS INT DETERMINISTIC MODIFIES SQL DATA BEGIN UPDATE {db}.g SET v = 'by function' WHERE id = i; RETURN i; END",
	"CREATE TABLE {x}.h (id INT PRIMARY KEY, v VARCHAR(20))",
	"INSERT INTO {x}.h VALUES (12, 'old')",
	"CREATE PROCEDURE ph(i INT) UPDATE {x}.h SET v = 'by procedure' WHERE id = i",
	"CREATE TABLE {x}.km (id INT PRIMARY KEY, v VARCHAR(20))",
	"INSERT INTO {x}.km VALUES (13, 'old')",
	"CREATE TRIGGER {x}.km_ins BEFORE INSERT ON {x}.km FOR EACH ROW SET NEW.id = NEW.id + 100",
	"CREATE TRIGGER {x}.km_upd BEFORE UPDATE ON {x}.km FOR EACH ROW BEGIN IF NEW.v = 'move' THEN SET NEW.id = OLD.id + 100; END IF; END",
	"CREATE TABLE {x}.gen (a INT NOT NULL, k INT AS (a * 10) PERSISTENT, v VARCHAR(20), UNIQUE KEY (k))",
	"INSERT INTO {x}.gen (a, v) VALUES (1, 'one')",
}

var mariaCrossCases = []unnamedCase{
	{"a trigger writing another database", "UPDATE a SET v = 'new' WHERE id = 1", "{x}.t", "id", 1, "new"},
	{"another database's trigger writing this one", "UPDATE {x}.w SET v = 'new' WHERE id = 2", "b", "id", 2, "new"},
	{"a cascade from another database", "DELETE FROM {x}.p WHERE id = 3", "c", "id", 3, ""},
	{"a cascade into another database", "UPDATE d SET id = 40 WHERE id = 4", "{x}.q", "id", 4, "40"},
	{"another database's view over this one's table", "UPDATE e SET v = 'new' WHERE id = 5", "{x}.ev", "id", 5, "new"},
	{"a write through another database's view", "UPDATE {x}.ev SET v = 'through view' WHERE id = 6", "e", "id", 6, "through view"},
	{"this database's view over another's table", "UPDATE {x}.f SET v = 'new' WHERE id = 7", "fv", "id", 7, "new"},
	{"a write through this database's view into another's table", "UPDATE fv SET v = 'through view' WHERE id = 8", "{x}.f", "id", 8, "through view"},
	{"another database's procedure writing this one", "CALL {x}.pr(9)", "g", "id", 9, "by procedure"},
	{"another database's function writing this one, by SELECT", "SELECT {x}.fn(10)", "g", "id", 10, "by function"},
	{"another database's function writing this one, by DO", "DO {x}.fn(11)", "g", "id", 11, "by function"},
	{"this database's procedure writing another's", "CALL ph(12)", "{x}.h", "id", 12, "by procedure"},
	// The first case's model reads teach both processes km's key (id),
	// so the second's raw UPDATE is keyed unless km is self-dependent.
	{"another database's BEFORE INSERT trigger moving the key", "INSERT INTO {x}.km VALUES (14, 'new')", "{x}.km", "id", 114, "new"},
	{"another database's BEFORE UPDATE trigger moving the key", "UPDATE {x}.km SET v = 'move' WHERE id = 13", "{x}.km", "id", 113, "move"},
	{"another database's generated key column (Config.KeyColumns) moved by its column", "UPDATE {x}.gen SET a = 2 WHERE k = 10", "{x}.gen", "k", 20, "one"},
}

func TestMariaDBCrossDatabaseNeverReadStale(t *testing.T) {
	checkRowsUnnamed(t, "mariadb", mariaCrossSchema, mariaCrossCases)
}

func checkRowsUnnamed(t *testing.T, engine string, schema []string, cases []unnamedCase) {
	store, _ := newRedisStore(t, t.Name())
	// gen has no primary key on MariaDB: the process keys it by k.
	keyColumns := withConfig(func(c *plugin.Config) { c.KeyColumns = map[string][]string{"gen": {"k"}} })
	e := newEngineEnv(t, engine, withStore(store), keyColumns)
	// {db} is the service's database, {x} another one on the same server.
	names := strings.NewReplacer("{db}", e.dbName, "{x}", e.dbName+"_x")
	t.Cleanup(func() { e.db.Exec("DROP DATABASE IF EXISTS " + e.dbName + "_x") })
	for _, q := range schema {
		if err := e.db.Exec(names.Replace(q)).Error; err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	other, _ := e.open(keyColumns) // a second process, started after the schema
	replica, err := gorm.Open(e.c.replica(0, e.dbName), quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB(replica)

	for _, c := range cases {
		c.write, c.table = names.Replace(c.write), names.Replace(c.table)
		e.resumeAll()
		before := readUnnamed(t, replica, "raw", c)
		e.pauseAll()
		if err := e.db.Exec(c.write).Error; err != nil {
			t.Fatalf("%s: %s: %v", c.name, c.write, err)
		}
		if got := readUnnamed(t, replica, "raw", c); got != before {
			t.Fatalf("%s: the replica changed while paused (%q -> %q): the case cannot tell a stale read", c.name, before, got)
		}
		if before == c.want {
			t.Fatalf("%s: the replica already had %q before the write: the case cannot tell a stale read", c.name, c.want)
		}
		for p, db := range []*gorm.DB{e.db, other} {
			hows := []string{"table", "raw"}
			switch {
			case c.countsRows():
				hows = hows[1:]
			case c.key == "id":
				hows = append(hows, "model")
			}
			for _, how := range hows {
				if got := readUnnamed(t, db, how, c); got != c.want {
					t.Errorf("STALE READ, %s: %s read of %s %s = %v by process %d: v = %q, want %q (the replica has %q)",
						c.name, how, c.table, c.key, c.id, p+1, got, c.want, before)
				}
			}
		}
	}
	e.resumeAll()
	for _, c := range cases {
		c.table = names.Replace(c.table)
		if got := readUnnamed(t, replica, "raw", c); got != c.want {
			t.Errorf("%s: after catch-up the replica has %q, want %q", c.name, got, c.want)
		}
	}
}

// readUnnamed reads column v of c's row by its key: "null" for NULL, ""
// for no row.
func readUnnamed(t *testing.T, db *gorm.DB, how string, c unnamedCase) string {
	t.Helper()
	var vs []sql.NullString
	if c.countsRows() {
		var n int
		if err := db.Raw("SELECT COUNT(*) FROM "+c.table+" WHERE "+c.key+" = ?", c.id).Scan(&n).Error; err != nil {
			t.Fatalf("%s: raw count: %v", c.name, err)
		}
		return fmt.Sprint(n)
	}
	switch how {
	case "table":
		var rows []map[string]any
		if err := db.Table(c.table).Select("v").Where(c.key+" = ?", c.id).Find(&rows).Error; err != nil {
			t.Fatalf("%s: db.Table read: %v", c.name, err)
		}
		for _, r := range rows {
			v := sql.NullString{Valid: r["v"] != nil}
			if b, ok := r["v"].([]byte); ok {
				v.String = string(b)
			} else if v.Valid {
				v.String = fmt.Sprint(r["v"])
			}
			vs = append(vs, v)
		}
	case "raw":
		if err := db.Raw("SELECT v FROM "+c.table+" WHERE "+c.key+" = ?", c.id).Scan(&vs).Error; err != nil {
			t.Fatalf("%s: raw read: %v", c.name, err)
		}
	case "model":
		var rows []kvRow
		if err := db.Table(c.table).Find(&rows, c.id).Error; err != nil {
			t.Fatalf("%s: model read: %v", c.name, err)
		}
		for _, r := range rows {
			vs = append(vs, r.V)
		}
	}
	switch {
	case len(vs) == 0:
		return ""
	case len(vs) > 1:
		t.Fatalf("%s: %s read returned %d rows", c.name, how, len(vs))
	case !vs[0].Valid:
		return "null"
	}
	return vs[0].String
}
