package integration_test

import (
	"slices"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/freshread/freshread/plugin"
)

// FnLog is the table the writing function f inserts into.
type FnLog struct {
	ID  uint `gorm:"primaryKey"`
	Val int
}

func (FnLog) TableName() string { return "fn_log" }

var (
	pgWritingFunction = []string{
		"CREATE TABLE fn_log (id serial PRIMARY KEY, val int)",
		// VOLATILE, the default: a write.
		"CREATE FUNCTION f(x int) RETURNS int LANGUAGE plpgsql AS $$ BEGIN INSERT INTO fn_log (val) VALUES (x); RETURN x; END $$",
	}
	mariaWritingFunction = []string{
		"CREATE TABLE fn_log (id INT AUTO_INCREMENT PRIMARY KEY, val INT)",
		// DETERMINISTIC (a lie) so that binary logging accepts it without
		// log_bin_trust_function_creators.
		"CREATE FUNCTION f(x INT) RETURNS INT DETERMINISTIC MODIFIES SQL DATA BEGIN INSERT INTO fn_log (val) VALUES (x); RETURN x; END",
	}
)

// checkGORMReadCallingWritingFunction: a GORM read whose text written by
// hand (a Select column, a Where condition) calls a function
// that writes runs on the primary, not on a replica, and its write is
// published (in a transaction by its commit, and for a locking read): a
// read of fn_log by key while replay is paused sees the function's rows;
// replication stays healthy.
func checkGORMReadCallingWritingFunction(t *testing.T, e *env, schema []string) {
	for _, s := range schema {
		if err := e.db.Exec(s).Error; err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if err := e.db.Create(&Item{ID: 1, Name: "one"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll() // let the replicas catch up
	e.waitReplicaServes(e.db)
	e.pauseAll()

	var got struct {
		ID   uint
		V    int
		Port int
	}
	if err := e.db.Model(&Item{}).Select("id, f(7) AS v, "+e.c.portExpr()+" AS port").Where("id = ?", 1).Scan(&got).Error; err != nil {
		t.Fatalf("a GORM read calling f(7) in its Select: %v", err)
	}
	e.mustPrimary(served{Port: got.Port}, "a GORM read calling a writing function in its Select")
	if got.V != 7 {
		t.Fatalf("f(7) = %d", got.V)
	}
	var items []Item
	if err := e.db.Where("id = ? AND f(8) = 8", 1).Find(&items).Error; err != nil || len(items) != 1 {
		t.Fatalf("a GORM read calling f(8) in its Where: %v, %v", items, err)
	}
	if d := e.lastDecision(); d.Target != plugin.Primary || d.Reason != plugin.ReasonWrite {
		t.Fatalf("the read calling f(8) in its Where: %+v, want the primary for a write", d)
	}
	// In a transaction: published by its commit.
	if err := e.db.Transaction(func(tx *gorm.DB) error {
		return tx.Model(&Item{}).Where("id = ? AND f(9) = 9", 1).Find(&items).Error
	}); err != nil {
		t.Fatalf("a GORM read calling f(9) in a transaction: %v", err)
	}
	// A locking read (FOR UPDATE): the primary, and published too.
	if err := e.db.Clauses(clause.Locking{Strength: "UPDATE"}).Where("id = ? AND f(10) = 10", 1).Find(&items).Error; err != nil {
		t.Fatalf("a locking GORM read calling f(10): %v", err)
	}

	// The writes reached the primary: read there without the plugin.
	direct, err := gorm.Open(e.c.primary(e.dbName), quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB(direct)
	var onPrimary []FnLog
	if err := direct.Order("id").Find(&onPrimary).Error; err != nil {
		t.Fatal(err)
	}
	var vals []int
	var ids []uint
	for _, r := range onPrimary {
		vals, ids = append(vals, r.Val), append(ids, r.ID)
	}
	if !slices.Equal(vals, []int{7, 8, 9, 10}) {
		t.Fatalf("fn_log on the primary holds %v, want [7 8 9 10]: the function's writes did not reach it", vals)
	}

	// Published: a read of fn_log by key sees them with replay paused.
	var logs []FnLog
	if err := e.db.Where("id IN ?", ids).Order("id").Find(&logs).Error; err != nil || len(logs) != len(ids) {
		t.Fatalf("STALE READ of fn_log by key after GORM reads called f: %+v, %v", logs, err)
	}
	for i, id := range ids {
		if err := e.db.Where("id = ?", id).Find(&logs).Error; err != nil || len(logs) != 1 || logs[0].Val != vals[i] {
			t.Fatalf("STALE READ of fn_log row %d by key after a GORM read called f(%d): %+v, %v", id, vals[i], logs, err)
		}
	}

	// Replication healthy: the replicas apply what follows.
	e.resumeAll()
	if err := direct.Create(&FnLog{Val: 11}).Error; err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp()
	for i := 0; i < e.c.replicas(); i++ {
		rdb, err := gorm.Open(e.c.replica(i, e.dbName), quiet())
		if err != nil {
			t.Fatal(err)
		}
		var onReplica []int
		err = rdb.Model(&FnLog{}).Order("id").Pluck("val", &onReplica).Error
		closeDB(rdb)
		if err != nil || !slices.Equal(onReplica, []int{7, 8, 9, 10, 11}) {
			t.Fatalf("replica %d: fn_log holds %v (%v), want [7 8 9 10 11]", i, onReplica, err)
		}
	}
}

func TestGORMReadCallingWritingFunction(t *testing.T) {
	checkGORMReadCallingWritingFunction(t, newEnv(t), pgWritingFunction)
}

func TestMariaDBGORMReadCallingWritingFunction(t *testing.T) {
	e := newMariaEnv(t)
	checkGORMReadCallingWritingFunction(t, e, mariaWritingFunction)
	// No SQL error on the replica's applier.
	status, err := e.c.(mariaCluster).ReplicaStatus(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if status["Slave_SQL_Running"] != "Yes" || status["Last_SQL_Errno"] != "0" {
		t.Fatalf("the replica's SQL thread: running %q, error %s %q", status["Slave_SQL_Running"], status["Last_SQL_Errno"], status["Last_SQL_Error"])
	}
}

// TestKeyedReadCallingReadOnlyFunction: a STABLE function (learnt
// read-only by the plugin) that reads another table, called in a read
// pinned by key, waits for every table: it returns the count of a write
// made to that other table with replay paused.
func TestKeyedReadCallingReadOnlyFunction(t *testing.T) {
	e := newEnv(t)
	for _, s := range []string{
		"CREATE TABLE audit (id serial PRIMARY KEY, note text)",
		"CREATE FUNCTION g(x int) RETURNS bigint LANGUAGE sql STABLE AS $$ SELECT count(*) FROM audit $$",
		"INSERT INTO audit (note) VALUES ('first')",
	} {
		if err := e.db.Exec(s).Error; err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if err := e.db.Create(&Item{ID: 1, Name: "one"}).Error; err != nil {
		t.Fatal(err)
	}
	db, _ := e.open() // a plugin that learns g (STABLE) read-only at start
	e.resumeAll()
	read := func() (n int64, port int) {
		t.Helper()
		var got struct {
			ID   uint
			N    int64
			Port int
		}
		if err := db.Model(&Item{}).Select("id, g(1) AS n, "+e.c.portExpr()+" AS port").Where("id = ?", 1).Scan(&got).Error; err != nil {
			t.Fatalf("a keyed read calling g: %v", err)
		}
		return got.N, got.Port
	}
	// g is read-only for the plugin: the read goes to a replica.
	e.eventuallyReplica(func() served { _, port := read(); return served{Port: port} }, "a read calling a read-only function")
	e.pauseAll()
	if err := db.Exec("INSERT INTO audit (note) VALUES ('second')").Error; err != nil {
		t.Fatal(err)
	}
	if n, port := read(); n != 2 {
		t.Fatalf("STALE READ: g(1) in a read of item 1 by key counted %d audit rows (port %d), want 2", n, port)
	}
	var raw int64
	if err := db.Raw("SELECT g(1) FROM items WHERE id = ?", 1).Scan(&raw).Error; err != nil || raw != 2 {
		t.Fatalf("STALE READ: raw SQL calling g in a read of item 1 by key: %d, %v; want 2", raw, err)
	}
	e.resumeAll()
	if n, _ := read(); n != 2 {
		t.Fatalf("after catch-up: %d", n)
	}
}

// checkKeyedReadWithSubquery: a read pinned by key whose Select holds a
// subquery reading the whole table waits for the table: it counts an item
// created with replay paused.
func checkKeyedReadWithSubquery(t *testing.T, e *env) {
	if err := e.db.Create(&Item{ID: 1, Name: "one"}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.waitReplicaServes(e.db)
	e.pauseAll()
	if err := e.db.Create(&Item{ID: 2, Name: "two"}).Error; err != nil {
		t.Fatal(err)
	}
	var got struct {
		ID   uint
		N    int64
		Port int
	}
	if err := e.db.Model(&Item{}).Where("id = ?", 1).Select("id, (SELECT count(*) FROM items) AS n, " + e.c.portExpr() + " AS port").Scan(&got).Error; err != nil {
		t.Fatal(err)
	}
	if got.N != 2 {
		t.Fatalf("STALE READ: a read of item 1 by key with a subquery counted %d items (port %d), want 2", got.N, got.Port)
	}
	e.resumeAll()
}

func TestKeyedReadWithSubquery(t *testing.T)        { checkKeyedReadWithSubquery(t, newEnv(t)) }
func TestMariaDBKeyedReadWithSubquery(t *testing.T) { checkKeyedReadWithSubquery(t, newMariaEnv(t)) }
