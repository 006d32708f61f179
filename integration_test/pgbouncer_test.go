package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// bouncedCluster is the PostgreSQL cluster with the primary and every
// replica reached through a PgBouncer of its own; the controls (pause,
// resume, catch-up, CreateDatabase) go to the servers directly.
// inet_server_port() still names the server that answered.
type bouncedCluster struct {
	pgCluster
	b *testcluster.PgBouncer
	// exec is pgx's default_query_exec_mode; "" leaves pgx's default
	// (cache_statement).
	exec string
}

func (c bouncedCluster) primary(db string) gorm.Dialector {
	return postgres.Open(testcluster.WithExecMode(c.b.PrimaryDSN(db), c.exec))
}

func (c bouncedCluster) replica(i int, db string) gorm.Dialector {
	return postgres.Open(testcluster.WithExecMode(c.b.ReplicaDSN(i, db), c.exec))
}

// newBouncedEnv is newEnv with the plugin's primary and replicas behind
// PgBouncer in pool mode mode, pgx opened with exec mode exec.
func newBouncedEnv(t *testing.T, mode, exec string, opts ...envOpt) *env {
	t.Helper()
	pg := testcluster.PostgresFor(t)
	b := testcluster.PgBouncerFor(t, pg, mode)
	return newEnvOn(t, bouncedCluster{pgCluster: pgCluster{pg}, b: b, exec: exec}, pg, opts...)
}

// TestPgBouncerFresh: the plugin with its primary and replicas behind
// PgBouncer, in transaction mode (pgx in simple_protocol and in
// cache_describe mode) and in session mode (pgx's default exec mode; and
// GORM's PrepareStmt): with replay paused on every replica, each read
// after a write sees the write (by key, by table, raw SQL, in and after a
// transaction, after a transaction of several statements, after a raw
// transaction on a db.Connection pinned session, after a transaction
// begun on one (txid_current), by another process sharing the store);
// with replay resumed, reads go to the replicas again.
func TestPgBouncerFresh(t *testing.T) {
	cases := []struct {
		name, mode, exec string
		prepareStmt      bool
		redis            bool // Redis as the store: writer tags (transactions only in transaction mode)
	}{
		{"transaction/simple_protocol", testcluster.PoolTransaction, "simple_protocol", false, false},
		{"transaction/simple_protocol/redis", testcluster.PoolTransaction, "simple_protocol", false, true},
		{"session/default/redis", testcluster.PoolSession, "", false, true},
		{"transaction/cache_describe", testcluster.PoolTransaction, "cache_describe", false, false},
		{"transaction/exec", testcluster.PoolTransaction, "exec", false, false},
		{"session/default", testcluster.PoolSession, "", false, false},
		{"session/PrepareStmt", testcluster.PoolSession, "", true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var opts []envOpt
			if tc.prepareStmt {
				opts = append(opts, withPrepareStmt())
			}
			if tc.redis {
				opts = append(opts, withRedis(t))
			}
			e := newBouncedEnv(t, tc.mode, tc.exec, opts...)
			freshThroughPooler(t, e)
		})
	}
}

func freshThroughPooler(t *testing.T, e *env) {
	db := e.db
	other, _ := e.open() // another process sharing the store
	e.waitReplicaServes(db)
	if err := db.Create(&Item{ID: 1, Name: "old", Version: 1}).Error; err != nil {
		t.Fatal(err)
	}
	e.resumeAll()
	e.eventuallyReplica(func() served { return e.readItem(db, 1) }, "item 1 before the pause")
	e.pauseAll()

	check := func(what, got, want string) {
		t.Helper()
		if got != want {
			t.Fatalf("STALE READ through PgBouncer (%s): got %q, want %q", what, got, want)
		}
	}

	// A write, then reads by key, by table and by raw SQL.
	if err := setName(db, 1); err != nil {
		t.Fatal(err)
	}
	var it Item
	if err := db.First(&it, 1).Error; err != nil {
		t.Fatal(err)
	}
	check("by key", it.Name, "new")
	var items []Item
	if err := db.Where("version = ?", 2).Find(&items).Error; err != nil {
		t.Fatal(err)
	}
	if len(items) != 1 {
		t.Fatalf("STALE READ through PgBouncer (by table): %d rows with version 2, want 1", len(items))
	}
	var name string
	if err := db.Raw("SELECT name FROM items WHERE id = ?", 1).Scan(&name).Error; err != nil {
		t.Fatal(err)
	}
	check("raw SQL", name, "new")
	check("another process", e.readItem(other, 1).Name, "new")

	// db.Transaction of several statements (the folded COMMIT), with a
	// read inside it.
	err := db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&Item{ID: 2, Name: "tx", Parts: []Part{{Label: "p"}}}).Error; err != nil {
			return err
		}
		if err := tx.Model(&Item{ID: 1}).Update("version", 3).Error; err != nil {
			return err
		}
		var in Item
		if err := tx.First(&in, 2).Error; err != nil {
			return err
		}
		check("inside a transaction", in.Name, "tx")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var withParts Item
	if err := db.Preload("Parts").First(&withParts, 2).Error; err != nil {
		t.Fatal(err)
	}
	check("after a transaction of several statements", withParts.Name, "tx")
	if len(withParts.Parts) != 1 {
		t.Fatalf("STALE READ through PgBouncer: item 2 has %d parts after the transaction, want 1", len(withParts.Parts))
	}
	if got := e.readItem(other, 1); got.Version != 3 {
		t.Fatalf("STALE READ through PgBouncer by another process after a transaction: %+v, want version 3", got)
	}

	// Begin and Commit.
	tx := db.Begin()
	if err := tx.Create(&Item{ID: 3, Name: "begun"}).Error; err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit().Error; err != nil {
		t.Fatal(err)
	}
	check("after Begin/Commit", e.readItem(db, 3).Name, "begun")

	// A raw transaction on a pinned connection.
	err = db.Connection(func(conn *gorm.DB) error {
		return execEach(conn.Session(&gorm.Session{}), "BEGIN", "UPDATE items SET name = 'pinned' WHERE id = 1", "COMMIT")
	})
	if err != nil {
		t.Fatal(err)
	}
	check("after a raw transaction on a pinned connection", e.readItem(other, 1).Name, "pinned")

	// A transaction begun on a pinned connection, which the plugin follows
	// by its txid_current().
	err = db.Connection(func(conn *gorm.DB) error {
		return conn.Transaction(func(tx *gorm.DB) error {
			return tx.Model(&Item{ID: 3}).Update("name", "pinned tx").Error
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	check("after a transaction begun on a pinned connection", e.readItem(db, 3).Name, "pinned tx")

	// A raw write outside a transaction.
	if err := db.Exec("UPDATE items SET version = 9 WHERE id = 2").Error; err != nil {
		t.Fatal(err)
	}
	if got := e.readItem(db, 2); got.Version != 9 {
		t.Fatalf("STALE READ through PgBouncer after a raw write: %+v, want version 9", got)
	}

	// DDL through the plugin: AutoMigrate, a text of several statements
	// (in transaction mode with Redis, each runs in a transaction of the
	// plugin's own), and CREATE INDEX CONCURRENTLY, which cannot run in
	// one; then a write to the new table, read fresh.
	type PoolerDDL struct {
		ID   int64 `gorm:"primaryKey;autoIncrement:false"`
		Note string
	}
	if err := db.AutoMigrate(&PoolerDDL{}); err != nil {
		t.Fatalf("AutoMigrate through PgBouncer: %v", err)
	}
	ddlText := []string{"ALTER TABLE pooler_ddls ADD COLUMN extra int; COMMENT ON TABLE pooler_ddls IS 'x'"}
	if db.Config.PrepareStmt { // a prepared statement holds one command
		ddlText = strings.Split(ddlText[0], "; ")
	}
	for _, q := range ddlText {
		if err := db.Exec(q).Error; err != nil {
			t.Fatalf("DDL %q through PgBouncer: %v", q, err)
		}
	}
	if err := db.Exec("CREATE INDEX CONCURRENTLY pooler_ddls_note ON pooler_ddls (note)").Error; err != nil {
		t.Fatalf("CREATE INDEX CONCURRENTLY through PgBouncer: %v", err)
	}
	if err := db.Exec("INSERT INTO pooler_ddls (id, note, extra) VALUES (1, 'fresh', 7)").Error; err != nil {
		t.Fatal(err)
	}
	var ddl PoolerDDL
	if err := other.First(&ddl, 1).Error; err != nil {
		t.Fatalf("read the new table through another process: %v", err)
	}
	check("a new table, from another process", ddl.Note, "fresh")

	// Replay resumed: the replicas serve the same data again.
	e.resumeAll()
	got := e.eventuallyReplica(func() served { return e.readItem(db, 1) }, "item 1 after the resume")
	check("on a replica after the resume", got.Name, "pinned")
	got = e.eventuallyReplica(func() served { return e.readItem(other, 3) }, "item 3 after the resume, another process")
	check("on a replica after the resume", got.Name, "pinned tx")
}

// TestPgBouncerTransactionModeRefused: behind PgBouncer 1.18 in
// transaction mode, which keeps no named prepared statements, db.Use
// refuses pgx's default exec mode (cache_statement) and describe_exec on
// the primary or a replica, and GORM's PrepareStmt, with ErrPooler naming
// the remedy; in session mode it accepts them. The first subtest shows
// why: pgx's default mode fails there without the plugin.
func TestPgBouncerTransactionModeRefused(t *testing.T) {
	pg := testcluster.PostgresFor(t)
	dbName := pg.CreateDatabase(t)
	tb := testcluster.PgBouncerFor(t, pg, testcluster.PoolTransaction)
	sb := testcluster.PgBouncerFor(t, pg, testcluster.PoolSession)

	t.Run("cache_statement fails without the plugin", func(t *testing.T) {
		err := namedStatementAcrossServers(t, tb.PrimaryDSN(dbName))
		if err == nil {
			t.Skip("the pooler keeps named prepared statements (PgBouncer 1.21 or later with max_prepared_statements)")
		}
		t.Logf("pgx's cache_statement through PgBouncer in transaction mode: %v", err)
	})

	use := func(b *testcluster.PgBouncer, primaryExec, replicaExec string, prepareStmt bool) error {
		db, err := gorm.Open(postgres.Open(testcluster.WithExecMode(b.PrimaryDSN(dbName), primaryExec)), &gorm.Config{Logger: logger.Discard, PrepareStmt: prepareStmt})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeDB(db) })
		cfg := plugin.Config{Store: lsnstore.NewMemory(), PollInterval: 5 * time.Millisecond}
		for i := range pg.Replicas() {
			cfg.Replicas = append(cfg.Replicas, plugin.Replica{Name: replicaName(i), Dialector: postgres.Open(testcluster.WithExecMode(b.ReplicaDSN(i, dbName), replicaExec))})
		}
		p := plugin.New(cfg)
		t.Cleanup(func() { p.Close() })
		return db.Use(p)
	}
	refused := []struct {
		name                     string
		primaryExec, replicaExec string
		prepareStmt              bool
		remedy                   string
	}{
		{"default exec mode", "", "", false, "default_query_exec_mode=simple_protocol"},
		{"describe_exec", "describe_exec", "simple_protocol", false, "default_query_exec_mode=simple_protocol"},
		{"a replica in the default exec mode", "simple_protocol", "", false, `replica "r0"`},
		{"PrepareStmt", "simple_protocol", "simple_protocol", true, "PrepareStmt"},
	}
	for _, c := range refused {
		t.Run("transaction/"+c.name, func(t *testing.T) {
			err := use(tb, c.primaryExec, c.replicaExec, c.prepareStmt)
			if !errors.Is(err, plugin.ErrPooler) || !strings.Contains(err.Error(), c.remedy) {
				t.Fatalf("db.Use behind PgBouncer in transaction mode with %s: %v, want ErrPooler naming %q", c.name, err, c.remedy)
			}
			t.Logf("refused: %v", err)
		})
	}
	for _, c := range []struct {
		name string
		b    *testcluster.PgBouncer
		exec string
		prep bool
	}{
		{"transaction/simple_protocol", tb, "simple_protocol", false},
		{"transaction/exec", tb, "exec", false},
		{"transaction/cache_describe", tb, "cache_describe", false},
		{"session/default exec mode", sb, "", false},
		{"session/PrepareStmt", sb, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := use(c.b, c.exec, c.exec, c.prep); err != nil {
				t.Fatalf("db.Use behind PgBouncer (%s): %v, want it accepted", c.name, err)
			}
		})
	}
}

// namedStatementAcrossServers runs, through dsn, a query in pgx's default
// exec mode (a named prepared statement) on one client connection, then
// again while another client connection holds the server connection the
// first one used; it returns the second run's error.
func namedStatementAcrossServers(t *testing.T, dsn string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c1, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	var n int
	if err := c1.QueryRowContext(ctx, "SELECT $1::int", 1).Scan(&n); err != nil {
		t.Fatalf("first run: %v", err)
	}
	tx, err := c2.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := tx.QueryRowContext(ctx, "SELECT 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return c1.QueryRowContext(ctx, "SELECT $1::int", 1).Scan(&n)
}

// TestPgBouncerModeProbedAmidOtherClients: the plugin tells PgBouncer's
// pool mode at db.Use while other clients of the same PgBouncer run
// statements, as the other processes of a service do. A probe that looks
// once can take transaction mode for session mode there: another client
// takes the server connection the probe released, so its two connections
// each keep one of their own. A pooler in transaction mode taken for one
// in session mode has session locks outlive their transactions and leaves
// the server process of an abandoned COMMIT unknown (a stale read, seen
// in TestAbandonedCommitNeverReadsStale/postgres-pgbouncer-autocommit
// under load); its sign here is that pgx's default exec mode, which such a
// pooler breaks, is no longer refused. Session mode must stay accepted.
func TestPgBouncerModeProbedAmidOtherClients(t *testing.T) {
	pg := testcluster.PostgresFor(t)
	dbName := pg.CreateDatabase(t)
	tb := testcluster.PgBouncerFor(t, pg, testcluster.PoolTransaction)
	sb := testcluster.PgBouncerFor(t, pg, testcluster.PoolSession)
	// busy runs clients statements through b: n of them, each pausing
	// pause between statements (pollers, as the other processes of a
	// service have, or a busy service).
	busy := func(b *testcluster.PgBouncer, n int, pause time.Duration) (stop func()) {
		db, err := sql.Open("pgx", testcluster.WithExecMode(b.PrimaryDSN(dbName), "simple_protocol"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					_, _ = db.ExecContext(ctx, "SELECT pg_backend_pid()")
					time.Sleep(pause)
				}
			}()
		}
		return func() { cancel(); wg.Wait(); db.Close() }
	}
	use := func(b *testcluster.PgBouncer) error {
		db, err := gorm.Open(postgres.Open(b.PrimaryDSN(dbName)), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		defer closeDB(db)
		cfg := plugin.Config{Store: lsnstore.NewMemory(), PollInterval: 5 * time.Millisecond}
		for i := range pg.Replicas() {
			cfg.Replicas = append(cfg.Replicas, plugin.Replica{Name: replicaName(i), Dialector: postgres.Open(testcluster.WithExecMode(b.ReplicaDSN(i, dbName), "simple_protocol"))})
		}
		p := plugin.New(cfg)
		defer p.Close()
		return db.Use(p)
	}
	if namedStatementAcrossServers(t, tb.PrimaryDSN(dbName)) == nil {
		t.Skip("the pooler keeps named prepared statements (PgBouncer 1.21 or later with max_prepared_statements)")
	}
	for _, load := range []struct {
		name    string
		clients int
		pause   time.Duration
	}{{"busy", 6, 0}, {"pollers", 3, 2 * time.Millisecond}} {
		stop := busy(tb, load.clients, load.pause)
		accepted := 0
		for range 20 {
			if err := use(tb); !errors.Is(err, plugin.ErrPooler) {
				accepted++
			}
		}
		stop()
		if accepted > 0 {
			t.Errorf("PgBouncer in transaction mode, other clients %s: pgx's default exec mode accepted at db.Use in %d of 20 tries (the pool mode taken for session), want refused with ErrPooler in every one", load.name, accepted)
		}
	}
	stop := busy(sb, 6, 0)
	defer stop()
	for i := range 5 {
		if err := use(sb); err != nil {
			t.Fatalf("PgBouncer in session mode, other clients busy, try %d: %v, want accepted", i, err)
		}
	}
}
