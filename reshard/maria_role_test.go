package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// TestMariaDBUnprivilegedMover is TestUnprivilegedMover on MariaDB: the
// move runs as a user with the privileges the guide lists and no more
// (on the shards' databases SELECT, INSERT, UPDATE, DELETE, CREATE,
// TRIGGER and LOCK TABLES; REPLICATION SLAVE and BINLOG MONITOR; the
// server's log_bin_trust_function_creators on). Without PROCESS the
// switch refuses to drain blind (ErrConfig) and rolls back; with it, the
// move completes.
func TestMariaDBUnprivilegedMover(t *testing.T) {
	ctx := context.Background()
	owners := []string{"s0", "s0", "s0", "s0", "s1", "s1", "s1", "s1"}
	e := newMariaEnv(t, []string{"s0", "s1"}, owners)
	e.seed(newLedger(), 1, 400)
	admin := e.db["s0"]
	user := fmt.Sprintf("fr_mover_%d", time.Now().UnixNano()%1e9)
	hosts := []string{"%", "localhost"}
	for _, h := range hosts {
		if _, err := admin.Exec(fmt.Sprintf(`CREATE USER '%s'@'%s' IDENTIFIED BY 'pw'`, user, h)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { admin.Exec(fmt.Sprintf(`DROP USER IF EXISTS '%s'@'%s'`, user, h)) })
	}
	var trust int
	if err := admin.QueryRow(`SELECT @@GLOBAL.log_bin_trust_function_creators`).Scan(&trust); err != nil {
		t.Fatal(err)
	}
	if trust == 0 {
		if _, err := admin.Exec(`SET GLOBAL log_bin_trust_function_creators = 1`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { admin.Exec(`SET GLOBAL log_bin_trust_function_creators = 0`) })
	}
	grant := func(q string) {
		t.Helper()
		for _, h := range hosts {
			if _, err := admin.Exec(fmt.Sprintf(q, user, h)); err != nil {
				t.Fatal(err)
			}
		}
	}
	grant(`GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '%s'@'%s'`)
	cfg := e.config()
	for i, s := range e.shards {
		grant("GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, TRIGGER, LOCK TABLES ON `" + e.dbName[s] + "`.* TO '%s'@'%s'")
		c, err := mysql.ParseDSN(e.maria.PrimaryDSN(e.dbName[s]))
		if err != nil {
			t.Fatal(err)
		}
		c.User, c.Passwd = user, "pw"
		db, err := sql.Open("mysql", c.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		cfg.Shards[i].DB, cfg.Shards[i].BinlogDSN = db, c.FormatDSN()
	}
	m := e.copiedMove(cfg, Move{Buckets: []int{1}, From: "s0", To: "s1"})
	if _, err := e.db["s0"].Exec(`UPDATE orders SET status = 'caught' WHERE user_id = 9`); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Switch(ctx); !errors.Is(err, ErrConfig) {
		t.Fatalf("Switch without PROCESS: %v, want ErrConfig", err)
	}
	if f := e.fences("s0"); len(f) != 0 {
		t.Fatalf("the refused switch left fences on the source: %v", f)
	}
	grant(`GRANT PROCESS ON *.* TO '%s'@'%s'`)
	// A global privilege reaches a session when it connects: the pools'
	// idle connections go.
	for _, sh := range cfg.Shards {
		sh.DB.SetMaxIdleConns(0)
		sh.DB.SetMaxIdleConns(2)
	}
	if _, err := m.Switch(ctx); err != nil {
		t.Fatal(err)
	}
	e.sameRows("s0", "s1", []int{1})
	if _, err := m.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.count("s0", "orders", []int{1}) + e.count("s0", "order_items", []int{1}); n != 0 {
		t.Fatalf("%d rows left on s0", n)
	}
}
