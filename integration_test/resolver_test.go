package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/plugin/dbresolver"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/plugin"
)

// ResAccount lives in the service's own database; ResOrder in the
// orders database, which a resolver of its own serves.
type ResAccount struct {
	ID   uint `gorm:"primaryKey"`
	Name string
}

type ResOrder struct {
	ID   uint `gorm:"primaryKey"`
	Name string
}

// answered is a row with the server and database that produced it.
type answered struct {
	Name   string
	Port   int
	DBName string
}

func (a answered) String() string {
	return fmt.Sprintf("%q from port %d, database %s", a.Name, a.Port, a.DBName)
}

// resolverCluster is two databases on the PostgreSQL cluster: main
// (ResAccount, read through replica 0) and orders (ResOrder, read through
// replica 1), each seeded with rows 1 and 2 named "old" and replicated.
type resolverCluster struct {
	t            *testing.T
	pg           *testcluster.Postgres
	main, orders string
}

func newResolverCluster(t *testing.T) *resolverCluster {
	t.Helper()
	pg := testcluster.PostgresFor(t)
	if pg.Replicas() < 2 {
		t.Fatalf("the resolver tests need 2 replicas, the cluster has %d", pg.Replicas())
	}
	rc := &resolverCluster{t: t, pg: pg, main: pg.CreateDatabase(t), orders: pg.CreateDatabase(t)}
	for _, s := range []struct {
		db    string
		model any
		rows  any
	}{
		{rc.main, &ResAccount{}, []ResAccount{{ID: 1, Name: "old"}, {ID: 2, Name: "old"}}},
		{rc.orders, &ResOrder{}, []ResOrder{{ID: 1, Name: "old"}, {ID: 2, Name: "old"}}},
	} {
		setup, err := gorm.Open(postgres.Open(pg.PrimaryDSN(s.db)), quiet())
		if err != nil {
			t.Fatal(err)
		}
		if err := setup.AutoMigrate(s.model); err != nil {
			t.Fatal(err)
		}
		if err := setup.Create(s.rows).Error; err != nil {
			t.Fatal(err)
		}
		closeDB(setup)
	}
	rc.caughtUp()
	return rc
}

func (rc *resolverCluster) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	rc.t.Cleanup(cancel)
	return ctx
}

func (rc *resolverCluster) caughtUp() {
	rc.t.Helper()
	if err := rc.pg.WaitCaughtUp(rc.ctx()); err != nil {
		rc.t.Fatal(err)
	}
}

func (rc *resolverCluster) pauseAll() {
	rc.t.Helper()
	for i := 0; i < rc.pg.Replicas(); i++ {
		if err := rc.pg.PauseReplay(rc.ctx(), i); err != nil {
			rc.t.Fatal(err)
		}
		i := i
		rc.t.Cleanup(func() { _ = rc.pg.ResumeReplay(context.Background(), i) })
	}
}

func (rc *resolverCluster) primaryDialector(db string) gorm.Dialector {
	return postgres.Open(rc.pg.PrimaryDSN(db))
}

func (rc *resolverCluster) replica(i int, db string) gorm.Dialector {
	return postgres.Open(rc.pg.ReplicaDSN(i, db))
}

// freshreadConfigs are the Config of the service's two resolvers: the
// default (replica 0 of main) and the orders resolver (its own source,
// replica 1 of orders), each with its own in-memory store.
func (rc *resolverCluster) freshreadConfigs() (def, orders plugin.Config) {
	def = plugin.Config{PollInterval: 5 * time.Millisecond,
		Replicas: []plugin.Replica{{Name: "main-r0", Dialector: rc.replica(0, rc.main)}}}
	orders = plugin.Config{PollInterval: 5 * time.Millisecond,
		Sources:  []gorm.Dialector{postgres.Open(rc.pg.PrimaryDSN(rc.orders))},
		Replicas: []plugin.Replica{{Name: "orders-r1", Dialector: rc.replica(1, rc.orders)}}}
	return def, orders
}

// open opens the service's *gorm.DB on main with the resolver installed.
func (rc *resolverCluster) open(r gorm.Plugin, conf *gorm.Config) *gorm.DB {
	rc.t.Helper()
	if conf == nil {
		conf = quiet()
	}
	db, err := gorm.Open(postgres.Open(rc.pg.PrimaryDSN(rc.main)), conf)
	if err != nil {
		rc.t.Fatal(err)
	}
	rc.t.Cleanup(func() { closeDB(db) })
	if err := db.Use(r); err != nil {
		rc.t.Fatal(err)
	}
	if c, ok := r.(interface{ Close() error }); ok {
		rc.t.Cleanup(func() { c.Close() })
	}
	return db
}

const whoSQL = "name, inet_server_port() AS port, current_database() AS db_name"

func (rc *resolverCluster) readAccount(db *gorm.DB, id uint) answered {
	rc.t.Helper()
	var a answered
	if err := db.Model(&ResAccount{}).Select(whoSQL).Where("id = ?", id).Scan(&a).Error; err != nil {
		rc.t.Fatalf("read account %d: %v", id, err)
	}
	return a
}

func (rc *resolverCluster) readOrder(db *gorm.DB, id uint) answered {
	rc.t.Helper()
	var a answered
	if err := db.Model(&ResOrder{}).Select(whoSQL).Where("id = ?", id).Scan(&a).Error; err != nil {
		rc.t.Fatalf("read order %d: %v", id, err)
	}
	return a
}

// onPrimaryOf and onReplicaOf check the server and database that
// answered.
func (rc *resolverCluster) onPrimaryOf(a answered, db, what string) {
	rc.t.Helper()
	if a.Port != rc.pg.PrimaryPort() || a.DBName != db {
		rc.t.Fatalf("%s: %s, want the primary (port %d), database %s", what, a, rc.pg.PrimaryPort(), db)
	}
}

func (rc *resolverCluster) onReplicaOf(a answered, i int, db, what string) {
	rc.t.Helper()
	if a.Port != rc.pg.ReplicaPort(i) || a.DBName != db {
		rc.t.Fatalf("%s: %s, want replica %d (port %d), database %s", what, a, i, rc.pg.ReplicaPort(i), db)
	}
}

// nameOnPrimary reads a row's name on a database's primary, outside the
// service.
func (rc *resolverCluster) nameOnPrimary(db, table string, id uint) string {
	rc.t.Helper()
	conn, err := gorm.Open(postgres.Open(rc.pg.PrimaryDSN(db)), quiet())
	if err != nil {
		rc.t.Fatal(err)
	}
	defer closeDB(conn)
	var name string
	if err := conn.Raw("SELECT name FROM "+table+" WHERE id = ?", id).Scan(&name).Error; err != nil {
		rc.t.Fatal(err)
	}
	return name
}

// untilReplica reads until read is answered by a replica (the plugin's
// poller has seen the replicas caught up), at most 10 s.
func (rc *resolverCluster) untilReplica(read func() answered) answered {
	rc.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := read()
		if a.Port != rc.pg.PrimaryPort() || time.Now().After(deadline) {
			return a
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestResolverPerModel: a model registered on a resolver with a source of
// its own is written on that source and read from that resolver's
// replica while it is fresh, from the source once a paused replica is
// stale; the default resolver keeps the other tables; dbresolver.Use,
// Write and Read are honoured, an unknown Use is refused.
func TestResolverPerModel(t *testing.T) {
	rc := newResolverCluster(t)
	def, orders := rc.freshreadConfigs()
	db := rc.open(plugin.Register(def).Register(orders, &ResOrder{}, "ledger"), nil)

	rc.onReplicaOf(rc.untilReplica(func() answered { return rc.readOrder(db, 1) }), 1, rc.orders, "order 1, replicas caught up")
	rc.onReplicaOf(rc.untilReplica(func() answered { return rc.readAccount(db, 1) }), 0, rc.main, "account 1, replicas caught up")

	rc.pauseAll()
	if err := db.Model(&ResOrder{ID: 1}).Update("name", "new").Error; err != nil {
		t.Fatal(err)
	}
	if got := rc.nameOnPrimary(rc.orders, "res_orders", 1); got != "new" {
		t.Fatalf("the update of order 1 did not reach the orders database: its name there is %q", got)
	}
	got := rc.readOrder(db, 1)
	if got.Name != "new" {
		t.Fatalf("STALE READ of order 1 after its update: %s", got)
	}
	rc.onPrimaryOf(got, rc.orders, "order 1 after its update, replica paused")
	rc.onReplicaOf(rc.readAccount(db, 1), 0, rc.main, "account 1, another resolver's table, untouched")

	if err := db.Model(&ResAccount{ID: 1}).Update("name", "new").Error; err != nil {
		t.Fatal(err)
	}
	if got := rc.nameOnPrimary(rc.main, "res_accounts", 1); got != "new" {
		t.Fatalf("the update of account 1 did not reach the main database: %q", got)
	}
	if got := rc.readAccount(db, 1); got.Name != "new" {
		t.Fatalf("STALE READ of account 1 after its update: %s", got)
	}

	// dbresolver.Use by name, on SQL that names no table.
	var a answered
	if err := db.Clauses(dbresolver.Use("ledger")).Raw("SELECT 'x' AS name, inet_server_port() AS port, current_database() AS db_name").Scan(&a).Error; err != nil {
		t.Fatal(err)
	}
	if a.DBName != rc.orders {
		t.Fatalf("dbresolver.Use(\"ledger\") ran on %s, want the orders database", a)
	}
	if err := db.Raw("SELECT 'x' AS name, inet_server_port() AS port, current_database() AS db_name").Scan(&a).Error; err != nil {
		t.Fatal(err)
	}
	if a.DBName != rc.main {
		t.Fatalf("SQL without a table or Use ran on %s, want the main database", a)
	}
	err := db.Clauses(dbresolver.Use("nope")).First(&ResAccount{}).Error
	if !errors.Is(err, plugin.ErrUnknownResolver) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("dbresolver.Use(\"nope\"): err %v, want ErrUnknownResolver naming it", err)
	}

	// dbresolver.Write and Read on the resolver's model.
	rc.onPrimaryOf(rc.readOrder(db.Clauses(dbresolver.Write), 2), rc.orders, "dbresolver.Write")
	stale := rc.readOrder(db.Clauses(dbresolver.Read), 1)
	rc.onReplicaOf(stale, 1, rc.orders, "dbresolver.Read")
	if stale.Name != "old" {
		t.Fatalf("dbresolver.Read on the paused replica returned %s; the test expects the stale value it asked for", stale)
	}

	// A transaction begun on the resolver runs there and publishes there.
	err = db.Clauses(dbresolver.Use("ledger")).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&ResOrder{ID: 3, Name: "in-tx"}).Error; err != nil {
			return err
		}
		return tx.Model(&ResOrder{ID: 2}).Update("name", "in-tx").Error
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := rc.nameOnPrimary(rc.orders, "res_orders", 3); got != "in-tx" {
		t.Fatalf("the transaction's insert is not in the orders database: %q", got)
	}
	for _, id := range []uint{2, 3} {
		got := rc.readOrder(db, id)
		if got.Name != "in-tx" {
			t.Fatalf("STALE READ of order %d after the resolver's transaction: %s", id, got)
		}
		rc.onPrimaryOf(got, rc.orders, fmt.Sprintf("order %d after the transaction", id))
	}
	// Use inside a transaction of the default database: refused.
	err = db.Transaction(func(tx *gorm.DB) error {
		return tx.Clauses(dbresolver.Use("ledger")).First(&ResOrder{}).Error
	})
	if !errors.Is(err, plugin.ErrUnknownResolver) {
		t.Fatalf("dbresolver.Use inside the default database's transaction: err %v, want ErrUnknownResolver", err)
	}
}

// TestResolverUseWithoutResolvers: a Plugin installed with New has no
// resolvers, and a statement with dbresolver.Use is refused, not routed.
func TestResolverUseWithoutResolvers(t *testing.T) {
	rc := newResolverCluster(t)
	def, _ := rc.freshreadConfigs()
	db := rc.open(plugin.New(def), nil)
	err := db.Clauses(dbresolver.Use("ledger")).First(&ResAccount{}).Error
	if !errors.Is(err, plugin.ErrUnknownResolver) || !strings.Contains(err.Error(), "plugin.Register") {
		t.Fatalf("dbresolver.Use on a Plugin without resolvers: err %v, want ErrUnknownResolver naming the remedy", err)
	}
	if got := rc.readAccount(db, 1); got.Name != "old" {
		t.Fatalf("account 1 after the refusal: %s", got)
	}
}

// TestResolverSameDatabaseAndSources: a resolver without Sources reads its
// table from replicas of its own while writes stay on the *gorm.DB's
// primary, and a write of its table in a transaction of the *gorm.DB is
// seen (one store); a resolver with two Sources reaching the same primary
// spreads its writes over both and reads none of them stale.
func TestResolverSameDatabaseAndSources(t *testing.T) {
	rc := newResolverCluster(t)
	def := plugin.Config{PollInterval: 5 * time.Millisecond,
		Replicas: []plugin.Replica{{Name: "main-r0", Dialector: rc.replica(0, rc.main)}}}
	accounts := plugin.Config{PollInterval: 5 * time.Millisecond,
		Replicas: []plugin.Replica{{Name: "main-r1", Dialector: rc.replica(1, rc.main)}}}
	db := rc.open(plugin.Register(def).Register(accounts, "res_accounts"), nil)
	rc.onReplicaOf(rc.untilReplica(func() answered { return rc.readAccount(db, 1) }), 1, rc.main, "account 1 through its resolver's replica")

	rc.pauseAll()
	err := db.Transaction(func(tx *gorm.DB) error {
		return tx.Model(&ResAccount{ID: 1}).Update("name", "new").Error
	})
	if err != nil {
		t.Fatal(err)
	}
	got := rc.readAccount(db, 1)
	if got.Name != "new" {
		t.Fatalf("STALE READ of account 1 written in a transaction of the *gorm.DB: %s", got)
	}
	rc.onPrimaryOf(got, rc.main, "account 1 after the write")

	// Two Sources reaching the same primary (two DSNs told apart by their
	// application_name), writes spread by round robin: each row records
	// the source that inserted it.
	_, orders := rc.freshreadConfigs()
	orders.Sources = []gorm.Dialector{
		postgres.Open(withDSNParam(rc.pg.PrimaryDSN(rc.orders), "application_name", "first")),
		postgres.Open(withDSNParam(rc.pg.PrimaryDSN(rc.orders), "application_name", "second")),
	}
	orders.Policy = dbresolver.RoundRobinPolicy()
	db2 := rc.open(plugin.Register(plugin.Config{}).Register(orders, &ResOrder{}), nil)
	sources := map[string]int{}
	for i := uint(10); i < 20; i++ {
		if err := db2.Exec("INSERT INTO res_orders (id, name) VALUES (?, current_setting('application_name'))", i).Error; err != nil {
			t.Fatal(err)
		}
		got := rc.readOrder(db2, i)
		if got.Name != "first" && got.Name != "second" {
			t.Fatalf("STALE READ of order %d inserted through one of two Sources: %s", i, got)
		}
		rc.onPrimaryOf(got, rc.orders, fmt.Sprintf("order %d, replicas paused", i))
		sources[got.Name]++
	}
	if sources["first"] != 5 || sources["second"] != 5 {
		t.Fatalf("10 inserts by round robin over two Sources: %v, want 5 each", sources)
	}
}

// withDSNParam adds a parameter to a PostgreSQL URL or key=value DSN.
func withDSNParam(dsn, key, value string) string {
	switch {
	case !strings.Contains(dsn, "://"):
		return dsn + " " + key + "=" + value
	case strings.Contains(dsn, "?"):
		return dsn + "&" + key + "=" + value
	}
	return dsn + "?" + key + "=" + value
}

// TestResolverTraceMode: TraceResolverMode prefixes each SQL line with
// where it ran.
func TestResolverTraceMode(t *testing.T) {
	rc := newResolverCluster(t)
	def, _ := rc.freshreadConfigs()
	def.TraceResolverMode = true
	lines := &lineLogger{}
	db := rc.open(plugin.New(def), &gorm.Config{Logger: logger.New(lines, logger.Config{LogLevel: logger.Info})})
	rc.onReplicaOf(rc.untilReplica(func() answered { return rc.readAccount(db, 2) }), 0, rc.main, "account 2")
	if err := db.Model(&ResAccount{ID: 1}).Update("name", "traced").Error; err != nil {
		t.Fatal(err)
	}
	if !lines.has("[replica main-r0] SELECT name, inet_server_port()") {
		t.Fatalf("no SQL line prefixed with [replica main-r0]:\n%s", lines)
	}
	if !lines.has(`[source] UPDATE "res_accounts" SET "name"='traced'`) {
		t.Fatalf("no SQL line prefixed with [source] for the update:\n%s", lines)
	}
}

// lineLogger collects what GORM's logger prints.
type lineLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLogger) Printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *lineLogger) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

func (l *lineLogger) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
