package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// TestUnprivilegedMover runs a move as a role that is not a superuser
// (REPLICATION, owner of the tables, CREATE on the schema): its sessions
// cannot be replication sessions, so the guard lets them through by
// freshread.mover and the foreign key is checked (parents are copied
// first). Without pg_read_all_stats the switch refuses to drain blind
// (ErrConfig) and rolls back; with it, the move completes.
func TestUnprivilegedMover(t *testing.T) {
	ctx := context.Background()
	owners := []string{"s0", "s0", "s0", "s0", "s1", "s1", "s1", "s1"}
	pg := testcluster.PostgresFor(t)
	role := fmt.Sprintf("fr_mover_%d", time.Now().UnixNano())
	admin, err := sql.Open("pgx", pg.PrimaryDSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec(`CREATE ROLE ` + role + ` LOGIN REPLICATION`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(`DROP ROLE IF EXISTS ` + role) })
	e := newEnv(t, []string{"s0", "s1"}, owners)
	t.Cleanup(func() {
		for _, s := range e.shards {
			e.db[s].Exec(`DROP OWNED BY ` + role)
		}
	})
	e.seed(newLedger(), 1, 400)
	cfg := e.config()
	for i, s := range e.shards {
		for _, q := range []string{`GRANT CREATE ON SCHEMA public TO ` + role, `ALTER TABLE orders OWNER TO ` + role, `ALTER TABLE order_items OWNER TO ` + role} {
			if _, err := e.db[s].Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		u, err := url.Parse(pg.PrimaryDSN(e.dbName[s]))
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(role)
		db, err := sql.Open("pgx", u.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		cfg.Shards[i].DB = db
	}
	if ok, err := mayReplicate(ctx, cfg.Shards[0].DB); err != nil || ok {
		t.Fatalf("the role may replicate: %v %v", ok, err)
	}
	m := e.copiedMove(cfg, Move{Buckets: []int{1}, From: "s0", To: "s1"})
	if _, err := e.db["s0"].Exec(`UPDATE orders SET status = 'caught' WHERE user_id = 9`); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Switch(ctx); !errors.Is(err, ErrConfig) {
		t.Fatalf("Switch without pg_read_all_stats: %v, want ErrConfig", err)
	}
	if f := e.fences("s0"); len(f) != 0 {
		t.Fatalf("the refused switch left fences on the source: %v", f)
	}
	if _, err := admin.Exec(`GRANT pg_read_all_stats TO ` + role); err != nil {
		t.Fatal(err)
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
