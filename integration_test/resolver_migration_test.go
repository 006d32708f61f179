package integration_test

import (
	"fmt"
	"testing"

	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"

	"github.com/freshread/freshread/plugin"
)

// serviceRoutes runs a service's statements on db and returns, per
// statement, the server and database that answered it; base keeps the
// rows one run creates apart from another's.
func serviceRoutes(t *testing.T, rc *resolverCluster, db *gorm.DB, base uint) map[string]answered {
	t.Helper()
	const who = "SELECT 'x' AS name, inet_server_port() AS port, current_database() AS db_name"
	routes := map[string]answered{
		"account read":                   rc.readAccount(db, 2),
		"order read":                     rc.readOrder(db, 2),
		"order read, dbresolver.Write":   rc.readOrder(db.Clauses(dbresolver.Write), 2),
		"account read, dbresolver.Write": rc.readAccount(db.Clauses(dbresolver.Write), 2),
	}
	var a answered
	if err := db.Clauses(dbresolver.Use("orders")).Raw(who).Scan(&a).Error; err != nil {
		t.Fatal(err)
	}
	routes["raw read, Use(orders)"] = a
	if err := db.Raw(who).Scan(&a).Error; err != nil {
		t.Fatal(err)
	}
	routes["raw read without a table"] = a
	if err := db.Raw("SELECT name, inet_server_port() AS port, current_database() AS db_name FROM res_orders WHERE id = 2").Scan(&a).Error; err != nil {
		t.Fatal(err)
	}
	routes["raw read of res_orders"] = a
	err := db.Clauses(dbresolver.Use("orders"), dbresolver.Write).Transaction(func(tx *gorm.DB) error {
		a = rc.readOrder(tx, 2)
		return tx.Create(&ResOrder{ID: base + 1, Name: "tx"}).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	routes["order read in a transaction on Use(orders)"] = a
	routes["order create in a transaction on Use(orders)"] = rc.holder(base+1, "res_orders")
	if err := db.Raw("UPDATE res_orders SET name = 'w' WHERE id = ? RETURNING name, inet_server_port() AS port, current_database() AS db_name", base+1).Scan(&a).Error; err != nil {
		t.Fatal(err)
	}
	routes["raw UPDATE ... RETURNING of res_orders"] = a
	if err := db.Create(&ResOrder{ID: base + 2, Name: "c"}).Error; err != nil {
		t.Fatal(err)
	}
	routes["order create"] = rc.holder(base+2, "res_orders")
	if err := db.Create(&ResAccount{ID: base + 3, Name: "c"}).Error; err != nil {
		t.Fatal(err)
	}
	routes["account create"] = rc.holder(base+3, "res_accounts")
	if err := db.Model(&ResOrder{ID: base + 2}).Update("name", "u").Error; err != nil {
		t.Fatal(err)
	}
	if got := rc.nameOnPrimary(rc.orders, "res_orders", base+2); got != "u" {
		t.Fatalf("the update of order %d is not in the orders database: %q", base+2, got)
	}
	return routes
}

// holder is where row id of table was written: the primary of the
// database that holds it.
func (rc *resolverCluster) holder(id uint, table string) answered {
	rc.t.Helper()
	for _, db := range []string{rc.main, rc.orders} {
		conn, err := gorm.Open(rc.primaryDialector(db), quiet())
		if err != nil {
			rc.t.Fatal(err)
		}
		var n int64
		err = conn.Table(table).Where("id = ?", id).Count(&n).Error
		closeDB(conn)
		if err == nil && n == 1 {
			return answered{Name: "written", Port: rc.pg.PrimaryPort(), DBName: db}
		}
	}
	return answered{Name: fmt.Sprintf("row %d of %s in no database", id, table)}
}

// TestResolverMigrationFromDBResolver: a service with two dbresolver
// resolvers (the default: replica 0 of its database; "orders": a source
// and replica 1 of another database) moves to freshread by renaming its
// configuration. Every statement is answered by the server and database
// that answered it under dbresolver while the replicas are caught up; with
// replay paused, dbresolver serves a written row stale and freshread does
// not.
func TestResolverMigrationFromDBResolver(t *testing.T) {
	rc := newResolverCluster(t)

	before := rc.open(dbresolver.Register(dbresolver.Config{
		Replicas: []gorm.Dialector{rc.replica(0, rc.main)},
	}).Register(dbresolver.Config{
		Sources:  []gorm.Dialector{rc.primaryDialector(rc.orders)},
		Replicas: []gorm.Dialector{rc.replica(1, rc.orders)},
	}, &ResOrder{}, "orders"), nil)
	want := serviceRoutes(t, rc, before, 100)
	rc.caughtUp()

	after := rc.open(plugin.Register(plugin.Config{
		Replicas: []plugin.Replica{{Name: "main-r0", Dialector: rc.replica(0, rc.main)}},
	}).Register(plugin.Config{
		Sources:  []gorm.Dialector{rc.primaryDialector(rc.orders)},
		Replicas: []plugin.Replica{{Name: "orders-r1", Dialector: rc.replica(1, rc.orders)}},
	}, &ResOrder{}, "orders"), nil)
	rc.untilReplica(func() answered { return rc.readAccount(after, 2) })
	rc.untilReplica(func() answered { return rc.readOrder(after, 2) })
	got := serviceRoutes(t, rc, after, 200)

	if len(got) != len(want) {
		t.Fatalf("%d statements with freshread, %d with dbresolver", len(got), len(want))
	}
	for stmt, w := range want {
		g := got[stmt]
		if g.Port != w.Port || g.DBName != w.DBName {
			t.Errorf("%s: answered by port %d, database %s with freshread; by port %d, database %s with dbresolver", stmt, g.Port, g.DBName, w.Port, w.DBName)
		}
	}
	// The routes themselves, not only their agreement.
	rc.onReplicaOf(got["account read"], 0, rc.main, "account read")
	rc.onReplicaOf(got["order read"], 1, rc.orders, "order read")
	rc.onPrimaryOf(got["order create"], rc.orders, "order create")
	rc.onPrimaryOf(got["account create"], rc.main, "account create")
	rc.onPrimaryOf(got["order read in a transaction on Use(orders)"], rc.orders, "order read in a transaction on Use(orders)")

	rc.pauseAll()
	for _, db := range []*gorm.DB{before, after} {
		if err := db.Model(&ResOrder{ID: 1}).Update("name", "new").Error; err != nil {
			t.Fatal(err)
		}
	}
	if stale := rc.readOrder(before, 1); stale.Name != "old" {
		t.Fatalf("dbresolver on a paused replica read %s; the test expects its stale read", stale)
	}
	if fresh := rc.readOrder(after, 1); fresh.Name != "new" {
		t.Fatalf("STALE READ with freshread after the move: %s", fresh)
	}
}
