package integration_test

import (
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/plugin"
)

// appPassword is the application user's password: it must never appear in
// a log line.
const appPassword = "app-secret-7f3c"

// appUserCluster is a cluster whose primary and replica dialectors log in
// as an application user holding privileges on its own database only
// (what a service account usually has), plus the global privileges in
// grants (MariaDB). The cluster's controls still run as the superuser.
type appUserCluster struct {
	cluster
	engine string
	grants []string // MariaDB global privileges, e.g. "PROCESS"
	user   string
	t      testing.TB
}

func (c *appUserCluster) createDatabase(t testing.TB) string {
	db := c.cluster.createDatabase(t)
	c.user = "app_" + strings.ToLower(db)
	root, err := sql.Open(map[string]string{"postgres": "pgx", "mariadb": "mysql"}[c.engine], c.rootDSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var stmts []string
	if c.engine == "postgres" {
		stmts = []string{
			fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD '%s'`, c.user, appPassword),
			fmt.Sprintf(`ALTER DATABASE %s OWNER TO %s`, db, c.user),
			fmt.Sprintf(`ALTER SCHEMA public OWNER TO %s`, c.user),
		}
	} else {
		stmts = []string{
			fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", c.user, appPassword),
			fmt.Sprintf("GRANT ALL PRIVILEGES ON `%s`.* TO '%s'@'%%'", db, c.user),
		}
		for _, g := range c.grants {
			stmts = append(stmts, fmt.Sprintf("GRANT %s ON *.* TO '%s'@'%%'", g, c.user))
		}
	}
	for _, s := range stmts {
		if _, err := root.ExecContext(t.Context(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	t.Cleanup(func() {
		root, err := sql.Open(map[string]string{"postgres": "pgx", "mariadb": "mysql"}[c.engine], c.rootDSN(""))
		if err != nil {
			return
		}
		defer root.Close()
		if c.engine == "mariadb" {
			root.Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%'", c.user))
		}
	})
	if err := c.cluster.waitCaughtUp(t.Context()); err != nil { // the role reaches the replicas
		t.Fatal(err)
	}
	return db
}

// rootDSN is the superuser's DSN of the primary's database db.
func (c *appUserCluster) rootDSN(db string) string {
	switch cl := c.cluster.(type) {
	case pgCluster:
		return cl.PrimaryDSN(db)
	case mariaCluster:
		return cl.PrimaryDSN(db)
	}
	panic("unknown cluster")
}

func (c *appUserCluster) primary(db string) gorm.Dialector {
	return c.asApp(c.rootDSN(db))
}

func (c *appUserCluster) replica(i int, db string) gorm.Dialector {
	switch cl := c.cluster.(type) {
	case pgCluster:
		return c.asApp(cl.ReplicaDSN(i, db))
	case mariaCluster:
		return c.asApp(cl.ReplicaDSN(db))
	}
	panic("unknown cluster")
}

// asApp rewrites a superuser DSN to log in as the application user.
func (c *appUserCluster) asApp(dsn string) gorm.Dialector {
	if c.engine == "postgres" {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			c.t.Fatal(err)
		}
		return postgres.Open(fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=disable", c.user, appPassword, cfg.Host, cfg.Port, cfg.Database))
	}
	cfg, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg.User, cfg.Passwd = c.user, appPassword
	return mysql.Open(cfg.FormatDSN())
}

// newAppUserEnv is an env whose plugin and *gorm.DB log in as an
// application user, with the plugin's log in logs.
func newAppUserEnv(t *testing.T, engine string, logs *syncBuffer, grants ...string) *env {
	t.Helper()
	c := &appUserCluster{engine: engine, grants: grants, t: t}
	logger := withConfig(func(cfg *plugin.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	if engine == "postgres" {
		pg := testcluster.PostgresFor(t)
		c.cluster = pgCluster{pg}
		return newEnvOn(t, c, pg, logger)
	}
	c.cluster = mariaCluster{testcluster.MariaDBFor(t)}
	return newEnvOn(t, c, nil, logger)
}

// TestPrivilegesOfAnApplicationUser: the plugin logs in as a user with
// privileges on its database only. PostgreSQL needs nothing more: no
// warning, reads fresh, a transaction begun on db.Connection followed to
// its commit. MariaDB: the replica's status needs SLAVE MONITOR and
// following a foreign transaction needs PROCESS; each missing one is said
// once at db.Use with the GRANT that gives it, routing stays fresh, and a
// write in a transaction the plugin cannot follow is refused before it is
// sent (ErrForeignTransaction), never published before its commit. With
// both granted there is no warning and such a write is followed. No log
// line holds the password.
func TestPrivilegesOfAnApplicationUser(t *testing.T) {
	freshRouting := func(t *testing.T, e *env) {
		t.Helper()
		e.staleOnReplicas()
		got := e.readItem(e.db, 1)
		if got.Name != "new" {
			t.Fatalf("STALE READ as the application user: %+v", got)
		}
		e.mustPrimary(got, "read of a write the paused replicas lack")
		e.resumeAll()
		if got := e.eventuallyReplica(func() served { return e.readItem(e.db, 1) }, "read after catch-up"); got.Name != "new" {
			t.Fatalf("replica read after catch-up: %+v", got)
		}
	}
	noSecret := func(t *testing.T, logs *syncBuffer) {
		t.Helper()
		if strings.Contains(logs.String(), appPassword) {
			t.Fatalf("the password is in the log: %s", logs.String())
		}
	}

	t.Run("postgres", func(t *testing.T) {
		var logs syncBuffer
		e := newAppUserEnv(t, "postgres", &logs)
		checkForeignTxNeverReadStale(t, e)
		if err := e.db.Delete(&Item{}, 1).Error; err != nil {
			t.Fatal(err)
		}
		freshRouting(t, e)
		if strings.Contains(logs.String(), "level=WARN") || strings.Contains(logs.String(), "level=ERROR") {
			t.Fatalf("warnings for an application user that owns its database: %s", logs.String())
		}
		noSecret(t, &logs)
	})

	t.Run("postgres without the position functions", func(t *testing.T) {
		var logs syncBuffer
		e := newAppUserEnv(t, "postgres", &logs)
		user := e.c.(*appUserCluster).user
		// The functions' privileges are the superuser's to change.
		asRoot, err := gorm.Open(postgres.Open(e.pg.PrimaryDSN(e.dbName)), quiet())
		if err != nil {
			t.Fatal(err)
		}
		defer closeDB(asRoot)
		root := func(q string) {
			t.Helper()
			if err := asRoot.Exec(q).Error; err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		root(`REVOKE EXECUTE ON FUNCTION pg_current_wal_insert_lsn() FROM PUBLIC`)
		db, err := gorm.Open(e.c.primary(e.dbName), quiet())
		if err != nil {
			t.Fatal(err)
		}
		defer closeDB(db)
		err = db.Use(plugin.New(plugin.Config{Replicas: []plugin.Replica{{Name: "r0", Dialector: e.c.replica(0, e.dbName)}}}))
		if !plugin.IsPrivilege(err) || !strings.Contains(err.Error(), "GRANT EXECUTE ON FUNCTION pg_current_wal_insert_lsn() TO "+user) {
			t.Fatalf("db.Use by a role refused the primary's position: %v, want ErrPrivilege naming the GRANT", err)
		}
		if strings.Contains(err.Error(), appPassword) {
			t.Fatalf("the password is in the error: %v", err)
		}
		root(`GRANT EXECUTE ON FUNCTION pg_current_wal_insert_lsn() TO PUBLIC`)

		// A replica that refuses its replay position: a warning naming the
		// GRANT, and every read fresh from the primary.
		root(`REVOKE EXECUTE ON FUNCTION pg_last_wal_replay_lsn() FROM PUBLIC`)
		e.waitCaughtUp()
		var logs2 syncBuffer
		db2, _ := e.open(withConfig(func(cfg *plugin.Config) {
			cfg.Logger = slog.New(slog.NewTextHandler(&logs2, &slog.HandlerOptions{Level: slog.LevelInfo}))
		}))
		if want := "GRANT EXECUTE ON FUNCTION pg_last_wal_replay_lsn() TO " + user; !strings.Contains(logs2.String(), want) {
			t.Fatalf("the log at db.Use does not say %q: %s", want, logs2.String())
		}
		if err := db2.Create(&Item{ID: 7, Name: "new"}).Error; err != nil {
			t.Fatal(err)
		}
		got := e.readItem(db2, 7)
		if got.Name != "new" {
			t.Fatalf("read with the replicas' positions refused: %+v", got)
		}
		e.mustPrimary(got, "read with the replicas' positions refused")
		root(`GRANT EXECUTE ON FUNCTION pg_last_wal_replay_lsn() TO PUBLIC`)
		noSecret(t, &logs2)
	})

	t.Run("mariadb database privileges only", func(t *testing.T) {
		var logs syncBuffer
		e := newAppUserEnv(t, "mariadb", &logs)
		out := logs.String()
		for _, want := range []string{
			"cannot read the replica's replication status",
			"GRANT SLAVE MONITOR ON *.* TO '" + e.c.(*appUserCluster).user + "'@'%'",
			"cannot be followed to their commit",
			"GRANT PROCESS ON *.* TO '" + e.c.(*appUserCluster).user + "'@'%'",
		} {
			if !strings.Contains(out, want) {
				t.Fatalf("the log at db.Use does not say %q: %s", want, out)
			}
		}
		freshRouting(t, e)

		// A write in a transaction begun on the pinned connection: refused
		// before it is sent.
		err := e.db.Connection(func(conn *gorm.DB) error {
			tx := conn.Begin()
			if tx.Error != nil {
				return tx.Error
			}
			defer tx.Rollback()
			return tx.Model(&Item{ID: 1}).Update("name", "foreign").Error
		})
		if !plugin.IsForeignTransaction(err) || !strings.Contains(err.Error(), "GRANT PROCESS") {
			t.Fatalf("write in a transaction the plugin cannot follow: %v, want ErrForeignTransaction naming the GRANT", err)
		}
		var name string
		if err := e.db.Model(&Item{}).Select("name").Where("id = 1").Clauses(dbresolver.Write).Scan(&name).Error; err != nil || name != "new" {
			t.Fatalf("item 1 on the primary after the refused write: %q, %v; want it unchanged", name, err)
		}
		// db.Transaction is not affected.
		if err := e.db.Transaction(func(tx *gorm.DB) error { return tx.Model(&Item{ID: 1}).Update("name", "tx").Error }); err != nil {
			t.Fatal(err)
		}
		noSecret(t, &logs)
	})

	t.Run("mariadb with SLAVE MONITOR and PROCESS", func(t *testing.T) {
		var logs syncBuffer
		e := newAppUserEnv(t, "mariadb", &logs, "SLAVE MONITOR", "PROCESS")
		time.Sleep(1500 * time.Millisecond) // a replication status check (every second)
		checkForeignTxNeverReadStale(t, e)
		if strings.Contains(logs.String(), "GRANT") || strings.Contains(logs.String(), "level=ERROR") {
			t.Fatalf("privilege warnings with the privileges granted: %s", logs.String())
		}
		noSecret(t, &logs)
	})
}
