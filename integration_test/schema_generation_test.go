package integration_test

import (
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/freshread/freshread/tracker"
)

// A schema change made by another process: a trigger on sa that writes
// sb, created after process B learned its dependency graph. B then writes
// a row of sa with every replica paused (they have replayed the trigger,
// not the write); the row of sb the trigger changed is read by key through
// db.Table and raw SQL, by process A and by B, and must be the new one
// (the paused replica is checked to hold the old). B's graph has no edge
// sa -> sb until it relearns it (every 30 seconds), so only the store's
// schema check (lsnstore.SchemaChanges) makes its raise cover sb.

var schemaGenTables = []string{
	"CREATE TABLE sa (id int PRIMARY KEY, v varchar(20))",
	"CREATE TABLE sb (id int PRIMARY KEY, v varchar(20))",
	"INSERT INTO sa VALUES (1, 'old')",
	"INSERT INTO sb VALUES (1, 'old')",
}

var pgSchemaGenTrigger = []string{
	`CREATE FUNCTION sa_to_sb() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sb SET v = NEW.v WHERE id = NEW.id;
  RETURN NULL;
END $$`,
	"CREATE TRIGGER sa_to_sb AFTER UPDATE ON sa FOR EACH ROW EXECUTE FUNCTION sa_to_sb()",
}

var mariaSchemaGenTrigger = []string{
	"CREATE TRIGGER sa_to_sb AFTER UPDATE ON sa FOR EACH ROW UPDATE sb SET v = NEW.v WHERE id = NEW.id",
}

// schemaGenCase is B's write and the row of sb it changes through the
// trigger.
var schemaGenCase = unnamedCase{"a write through a trigger another process created", "UPDATE sa SET v = 'new' WHERE id = 1", "sb", "id", 1, "new"}

// TestSchemaChangeByAnotherProcessNeverReadStale: process A creates the
// trigger through its plugin.
func TestSchemaChangeByAnotherProcessNeverReadStale(t *testing.T) {
	checkSchemaChangeByAnotherProcess(t, "postgres", pgSchemaGenTrigger)
}

func TestMariaDBSchemaChangeByAnotherProcessNeverReadStale(t *testing.T) {
	checkSchemaChangeByAnotherProcess(t, "mariadb", mariaSchemaGenTrigger)
}

func checkSchemaChangeByAnotherProcess(t *testing.T, engine string, trigger []string) {
	store, _ := newRedisStore(t, t.Name())
	e := newEngineEnv(t, engine, withStore(store))
	execAll(t, e.db, schemaGenTables)
	b, _ := e.open() // process B, its graph learned now
	execAll(t, e.db, trigger)
	checkWriteAfterSchemaChange(t, e, b)
}

// TestTrackerSchemaChangeOutsideNeverReadStale: the trigger is created
// by another program (a pgx connection, as psql or a migration tool
// would) while a tracker in ModeLogical runs, which publishes no graph
// meanwhile (its interval is an hour). The tracker is stopped once it has
// decoded the schema change, so that B's write is published by B alone,
// as it is while the tracker has not decoded it yet.
func TestTrackerSchemaChangeOutsideNeverReadStale(t *testing.T) {
	name := "ddlgen-" + t.Name()
	store, _ := newRedisStore(t, name)
	e := newEnv(t, withStore(store))
	execAll(t, e.db, schemaGenTables)
	b, _ := e.open()
	run := startTracker(e, name, tracker.ModeLogical, func(c *tracker.Config) { c.DependencyInterval = time.Hour })
	t.Cleanup(func() { dropSlot(e, run) })
	waitReady(t, run.tr, 20*time.Second)
	raw := e.rawConn()
	waitDDLTrigger(t, raw, run)
	var pos = rawWrite(t, raw, pgSchemaGenTrigger[0])
	pos = rawWrite(t, raw, pgSchemaGenTrigger[1])
	took := waitRaised(t, store, []string{"sb"}, pos, 30*time.Second)
	t.Logf("the tracker published the trigger's creation %v after its commit", took)
	run.stop()
	checkWriteAfterSchemaChange(t, e, b)
}

// checkWriteAfterSchemaChange: once the replicas have replayed the
// trigger, B writes schemaGenCase with every replica paused, and A
// (e.db) and B read it.
func checkWriteAfterSchemaChange(t *testing.T, e *env, b *gorm.DB) {
	replica, err := gorm.Open(e.c.replica(0, e.dbName), quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB(replica)
	c := schemaGenCase
	e.resumeAll()
	e.pauseAll()
	if err := b.Exec(c.write).Error; err != nil {
		t.Fatalf("%s: %v", c.write, err)
	}
	checkReadsAfterSchemaChange(t, replica, c, e.db, b)
}

func execAll(t *testing.T, db *gorm.DB, stmts []string) {
	t.Helper()
	for _, q := range stmts {
		if err := db.Exec(q).Error; err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestSchemaChangeInTransactionNeverReadStale: the process that creates
// a view writes through it in the same transaction, with every replica
// paused. Its graph, relearned inside the transaction on another
// connection, lacks the view; the commit's raise must count the
// transaction's own schema change against that graph and cover the
// view's table. (A trigger would not tell: creating one raises every
// table.)
func TestSchemaChangeInTransactionNeverReadStale(t *testing.T) {
	store, _ := newRedisStore(t, t.Name())
	e := newEnv(t, withStore(store))
	execAll(t, e.db, schemaGenTables)
	b, _ := e.open()
	replica, err := gorm.Open(e.c.replica(0, e.dbName), quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB(replica)
	c := unnamedCase{"a write through a view created in its own transaction", "UPDATE sv SET v = 'new' WHERE id = 1", "sa", "id", 1, "new"}
	e.waitCaughtUp()
	e.pauseAll()
	err = e.db.Transaction(func(tx *gorm.DB) error {
		for _, q := range []string{"CREATE VIEW sv AS SELECT * FROM sa", c.write} {
			if err := tx.Exec(q).Error; err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkReadsAfterSchemaChange(t, replica, c, e.db, b)
}

// checkReadsAfterSchemaChange: the paused replica still has c's old row,
// and processes A and B (dbs) read the new one by table and raw SQL.
func checkReadsAfterSchemaChange(t *testing.T, replica *gorm.DB, c unnamedCase, dbs ...*gorm.DB) {
	t.Helper()
	if got := readUnnamed(t, replica, "raw", c); got != "old" {
		t.Fatalf("the paused replica has %q, want \"old\": the case cannot tell a stale read", got)
	}
	for p, db := range dbs {
		for _, how := range []string{"table", "raw"} {
			if got := readUnnamed(t, db, how, c); got != c.want {
				t.Errorf("STALE READ, %s: %s read of %s %s = %v by process %s: v = %q, want %q",
					c.name, how, c.table, c.key, c.id, []string{"A", "B"}[p], got, c.want)
			}
		}
	}
}
