package integration_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/freshread/freshread/lsnstore"
)

// Widget is created, changed and dropped by the schema tests while every
// replica is paused; WidgetV2 is its next version (a column, an index and
// a check constraint more), on the same table.
type Widget struct {
	ID   uint `gorm:"primaryKey"`
	Name string
}

type WidgetV2 struct {
	ID    uint   `gorm:"primaryKey"`
	Name  string `gorm:"check:name_checker,name <> 'forbidden'"`
	Color string `gorm:"index:idx_widgets_color;size:32"`
}

func (WidgetV2) TableName() string { return "widgets" }

// schemaExpr is the SQL expression for the current schema (PostgreSQL) or
// database (MariaDB), as information_schema.tables.table_schema holds it.
func (e *env) schemaExpr() string {
	if e.pg != nil {
		return "current_schema()"
	}
	return "DATABASE()"
}

// tablesNamed counts, with a raw catalog query, the tables named name, with
// the port of the server that answered.
func (e *env) tablesNamed(db *gorm.DB, name string) counted {
	e.t.Helper()
	return e.count(db, "SELECT COUNT(*) AS n, "+e.c.portExpr()+" AS port FROM information_schema.tables WHERE table_name = '"+name+"' AND table_schema = "+e.schemaExpr())
}

func columnNames(t *testing.T, db *gorm.DB, model any) []string {
	t.Helper()
	cols, err := db.Migrator().ColumnTypes(model)
	if err != nil {
		t.Fatalf("ColumnTypes: %v", err)
	}
	var names []string
	for _, c := range cols {
		names = append(names, c.Name())
	}
	return names
}

func indexNames(t *testing.T, db *gorm.DB, model any) []string {
	t.Helper()
	idx, err := db.Migrator().GetIndexes(model)
	if err != nil {
		t.Fatalf("GetIndexes: %v", err)
	}
	var names []string
	for _, i := range idx {
		names = append(names, i.Name())
	}
	return names
}

// checkMigratorOnPausedReplicas: with every replica paused, AutoMigrate
// creates a table, adds a column, an index and a check constraint, runs
// again as a no-op; every Migrator read right after each change sees it
// (HasTable, GetTables, ColumnTypes, HasColumn, HasIndex, GetIndexes,
// HasConstraint, and a raw information_schema query, which is answered by
// the primary); rename of a table and of a column and drop are seen too,
// in both directions (the old name is gone). Once the replicas replay the
// changes, catalog reads go back to them.
func checkMigratorOnPausedReplicas(t *testing.T, e *env) {
	e.pauseAll()
	db := e.db
	m := db.Migrator()

	if err := db.AutoMigrate(&Widget{}); err != nil {
		t.Fatalf("AutoMigrate (create): %v", err)
	}
	if !m.HasTable(&Widget{}) || !m.HasTable("widgets") {
		t.Fatal("STALE CATALOG: HasTable is false right after AutoMigrate created the table")
	}
	if c := e.tablesNamed(db, "widgets"); c.N != 1 || c.Port != e.c.primaryPort() {
		t.Fatalf("STALE CATALOG: information_schema.tables has %d rows for the new table (port %d, primary %d)", c.N, c.Port, e.c.primaryPort())
	}
	tables, err := m.GetTables()
	if err != nil || !slices.Contains(tables, "widgets") {
		t.Fatalf("STALE CATALOG: GetTables = %q (err %v), want widgets in it", tables, err)
	}
	if cols := columnNames(t, db, &Widget{}); !slices.Contains(cols, "name") {
		t.Fatalf("STALE CATALOG: ColumnTypes = %q, want name", cols)
	}

	if err := db.AutoMigrate(&WidgetV2{}); err != nil {
		t.Fatalf("AutoMigrate (add a column, an index, a check): %v", err)
	}
	if !m.HasColumn(&WidgetV2{}, "Color") {
		t.Fatal("STALE CATALOG: HasColumn is false right after AutoMigrate added the column")
	}
	if cols := columnNames(t, db, &WidgetV2{}); !slices.Contains(cols, "color") {
		t.Fatalf("STALE CATALOG: ColumnTypes = %q, want color", cols)
	}
	if !m.HasIndex(&WidgetV2{}, "idx_widgets_color") {
		t.Fatal("STALE CATALOG: HasIndex is false right after AutoMigrate created the index")
	}
	if idx := indexNames(t, db, &WidgetV2{}); !slices.Contains(idx, "idx_widgets_color") {
		t.Fatalf("STALE CATALOG: GetIndexes = %q, want idx_widgets_color", idx)
	}
	if !m.HasConstraint(&WidgetV2{}, "name_checker") {
		t.Fatal("STALE CATALOG: HasConstraint is false right after AutoMigrate created the check")
	}
	// Again: nothing to do. A stale catalog would add the column, the
	// index or the constraint a second time and fail.
	if err := db.AutoMigrate(&WidgetV2{}); err != nil {
		t.Fatalf("AutoMigrate (no-op) failed: %v", err)
	}
	if err := db.Create(&WidgetV2{ID: 1, Name: "w", Color: "red"}).Error; err != nil {
		t.Fatal(err)
	}
	var w WidgetV2
	if err := db.First(&w, 1).Error; err != nil || w.Color != "red" {
		t.Fatalf("STALE READ of the new column: %+v (err %v)", w, err)
	}

	// Raw DDL through Exec (the Migrator's RenameColumn needs a model
	// field of the new name on MariaDB).
	if err := db.Exec("ALTER TABLE widgets RENAME COLUMN name TO title").Error; err != nil {
		t.Fatal(err)
	}
	if !m.HasColumn("widgets", "title") || m.HasColumn("widgets", "name") {
		t.Fatal("STALE CATALOG: the renamed column is not seen under its new name only")
	}
	if err := m.RenameTable("widgets", "gizmos"); err != nil {
		t.Fatal(err)
	}
	if !m.HasTable("gizmos") || m.HasTable("widgets") {
		t.Fatal("STALE CATALOG: the renamed table is not seen under its new name only")
	}
	if err := m.DropTable("gizmos"); err != nil {
		t.Fatal(err)
	}
	if m.HasTable("gizmos") {
		t.Fatal("STALE CATALOG: HasTable is true right after DropTable")
	}
	if c := e.tablesNamed(db, "gizmos"); c.N != 0 {
		t.Fatalf("STALE CATALOG: information_schema.tables still lists the dropped table (port %d)", c.Port)
	}

	// Liveness: once the replicas have replayed the changes, the catalog
	// is read from them again.
	if err := db.AutoMigrate(&Widget{}); err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	c := e.tablesNamed(db, "widgets")
	if c.N != 1 || !e.isReplica(c.Port) {
		t.Fatalf("after catch-up: %d rows from port %d, want 1 from a replica", c.N, c.Port)
	}
	if !m.HasTable(&Widget{}) {
		t.Fatal("HasTable false after catch-up")
	}
}

func TestMigratorOnPausedReplicas(t *testing.T) {
	checkMigratorOnPausedReplicas(t, newEnv(t))
}

func TestMariaDBMigratorOnPausedReplica(t *testing.T) {
	checkMigratorOnPausedReplicas(t, newMariaEnv(t))
}

// checkSchemaChangeSeenElsewhere: a table created by one process (through
// the Migrator, and by raw DDL inside a transaction) is seen by the
// Migrator of another process that shares the Redis store, with every
// replica paused; the transaction's DDL is published when it commits.
func checkSchemaChangeSeenElsewhere(t *testing.T, newEnv func(*testing.T, ...envOpt) *env) {
	store, _ := newRedisStore(t, "schema-"+t.Name())
	e := newEnv(t, withStore(store))
	other, _ := e.open()
	e.pauseAll()

	if err := e.db.Migrator().CreateTable(&Widget{}); err != nil {
		t.Fatal(err)
	}
	if !other.Migrator().HasTable(&Widget{}) {
		t.Fatal("STALE CATALOG: another process does not see the table this one created")
	}
	if c := e.tablesNamed(other, "widgets"); c.N != 1 {
		t.Fatalf("STALE CATALOG: another process reads %d rows for the new table (port %d)", c.N, c.Port)
	}

	err := e.db.Transaction(func(tx *gorm.DB) error {
		return tx.Exec("CREATE TABLE made_in_tx (id int)").Error
	})
	if err != nil {
		t.Fatal(err)
	}
	if !other.Migrator().HasTable("made_in_tx") {
		t.Fatal("STALE CATALOG: a table created in a committed transaction is not seen")
	}
	if !e.db.Migrator().HasTable("made_in_tx") {
		t.Fatal("STALE CATALOG: the creating process does not see the table it created in a transaction")
	}
}

func TestSchemaChangeSeenByAnotherProcess(t *testing.T) {
	checkSchemaChangeSeenElsewhere(t, newEnv)
}

func TestMariaDBSchemaChangeSeenByAnotherProcess(t *testing.T) {
	checkSchemaChangeSeenElsewhere(t, newMariaEnv)
}

// TestTrackerSeesOutsideSchemaChange: a table created by another program
// (a pgx connection, as psql or a migration tool would) while every
// replica is paused is seen by the plugin's Migrator once the tracker has
// decoded the DDL (its event trigger's message), and the catalog is read
// from the primary.
func TestTrackerSeesOutsideSchemaChange(t *testing.T) {
	name := "ddl-" + t.Name()
	store, _ := newRedisStore(t, name)
	e := newEnv(t, withStore(store))
	run := startLogicalTracker(e, name)
	raw := e.rawConn()
	waitDDLTrigger(t, raw, run)
	e.resumeAll()
	e.pauseAll()

	pos := rawWrite(t, raw, "CREATE TABLE made_by_psql (id int)")
	took := waitRaised(t, store, []string{lsnstore.Schema}, pos, 30*time.Second)
	t.Logf("outside DDL published %v after its commit", took)
	if !e.db.Migrator().HasTable("made_by_psql") {
		t.Fatal("STALE CATALOG: HasTable is false after another program created the table")
	}
	if c := e.tablesNamed(e.db, "made_by_psql"); c.N != 1 || c.Port != e.c.primaryPort() {
		t.Fatalf("STALE CATALOG: %d rows from port %d for a table another program created", c.N, c.Port)
	}
}

// waitDDLTrigger waits until the tracker has installed its event trigger
// (tracker/ddl.go).
func waitDDLTrigger(t *testing.T, raw *pgx.Conn, run *trackerRun) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var ok bool
		if err := raw.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'freshread_ddl')").Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tracker did not install its event trigger; logs:\n%s", run.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkMigrationBeforeStart: a table created by another program (a
// migration tool run during a deploy) just before a process starts, while
// every replica is paused, is seen by that process's Migrator without a
// tracker. No schema-specific mechanism does it: a replica is usable only
// once it has replayed what the primary had MaxLag ago, or at the
// process's start when the process is younger than MaxLag (poller.go), so
// everything committed before the start is covered. Once the replicas
// replay it they serve the catalog again.
func checkMigrationBeforeStart(t *testing.T, e *env) {
	e.pauseAll()
	tool, err := gorm.Open(e.c.primary(e.dbName), quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB(tool)
	if err := tool.Exec("CREATE TABLE migrated_before_start (id int)").Error; err != nil {
		t.Fatal(err)
	}
	started, _ := e.open()
	if !started.Migrator().HasTable("migrated_before_start") {
		t.Fatal("STALE CATALOG: a process started after a migration does not see its table")
	}
	if c := e.tablesNamed(started, "migrated_before_start"); c.N != 1 || c.Port != e.c.primaryPort() {
		t.Fatalf("STALE CATALOG: %d rows from port %d for a table migrated before the start", c.N, c.Port)
	}
	e.resumeAll()
	if c := e.tablesNamed(started, "migrated_before_start"); c.N != 1 || !e.isReplica(c.Port) {
		t.Fatalf("after catch-up: %d rows from port %d, want 1 from a replica", c.N, c.Port)
	}
}

func TestMigrationBeforeStart(t *testing.T) {
	checkMigrationBeforeStart(t, newEnv(t))
}

func TestMariaDBMigrationBeforeStart(t *testing.T) {
	checkMigrationBeforeStart(t, newMariaEnv(t))
}
