package reshard

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// wantMariaGuard checks that err is the MariaDB guard's: error 1644 with
// SQLSTATE FRB01, naming the table, the bucket and the state.
func wantMariaGuard(t *testing.T, err error, table, bucket, state string) {
	t.Helper()
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1644 || sqlState(err) != "FRB01" {
		t.Fatalf("err = %v, want error 1644 with SQLSTATE FRB01", err)
	}
	for _, s := range []string{table + ": ", "bucket " + bucket + " ", " is " + state + " "} {
		if !strings.Contains(me.Message, s) {
			t.Errorf("guard error %q does not say %q", me.Message, s)
		}
	}
}

// mariaTriggers returns the guard triggers' bodies on a shard, by name.
func (e *env) mariaTriggers(shard string) map[string]string {
	e.t.Helper()
	rows, err := e.db[shard].Query(`SELECT TRIGGER_NAME, ACTION_STATEMENT FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() AND TRIGGER_NAME LIKE 'freshread_guard_%'`)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var n, b string
		if err := rows.Scan(&n, &b); err != nil {
			e.t.Fatal(err)
		}
		out[n] = b
	}
	return out
}

// TestMariaDBGuard: on MariaDB, the guard's triggers refuse an
// application's insert, update (of the old or the new row's bucket) and
// delete of a fenced bucket with SQLSTATE FRB01 (error 1644) naming the
// table, the bucket, the state and the move; other buckets pass; the
// mover's sessions pass, and the connection they used is the
// application's again afterwards (guarded, foreign keys checked, its time
// zone back). Installing again changes nothing; another number of buckets
// replaces the triggers.
func TestMariaDBGuard(t *testing.T) {
	ctx := context.Background()
	owners := []string{"s0", "s0", "s0", "s0", "s1", "s1", "s1", "s1"}
	e := newMariaEnv(t, []string{"s0", "s1"}, owners)
	e.mariaSeed(newLedger(), 1, 200)
	eng := mariaEngine{}
	install := func(shard string, nb int) {
		t.Helper()
		var sides []*tableSide
		for _, tb := range testTables {
			side, err := eng.describe(ctx, e.db[shard], shard, tb)
			if err != nil {
				t.Fatal(err)
			}
			sides = append(sides, side)
		}
		if err := eng.installGuard(ctx, e.db[shard], "", sides, nb); err != nil {
			t.Fatal(err)
		}
	}
	install("s0", nbTest)
	first := e.mariaTriggers("s0")
	if len(first) != 6 {
		t.Fatalf("%d guard triggers on s0, want 3 per table: %v", len(first), first)
	}
	fence := func(shard string, buckets []int, state, move string) error {
		return eng.withTx(ctx, e.db[shard], func(tx *sql.Tx) error { return eng.fence(ctx, tx, "", buckets, state, move) })
	}
	if err := fence("s0", []int{1}, FenceMoved, "m1"); err != nil {
		t.Fatal(err)
	}

	// Bucket 1 (users 1, 9, 17, ...) is refused on s0 in every way.
	wantMariaGuard(t, e.mariaExec("s0", `INSERT INTO orders (id, user_id) VALUES (900001, 9)`), "orders", "1", "moved")
	wantMariaGuard(t, e.mariaExec("s0", `UPDATE orders SET status = 'late' WHERE user_id = 9`), "orders", "1", "moved")
	wantMariaGuard(t, e.mariaExec("s0", `UPDATE orders SET user_id = 9 WHERE user_id = 8`), "orders", "1", "moved") // into the bucket
	wantMariaGuard(t, e.mariaExec("s0", `UPDATE orders SET user_id = 8 WHERE user_id = 9`), "orders", "1", "moved") // out of it
	wantMariaGuard(t, e.mariaExec("s0", `DELETE FROM order_items WHERE user_id = 17`), "order_items", "1", "moved")
	err := e.mariaExec("s0", `DELETE FROM orders WHERE user_id = 25`)
	wantMariaGuard(t, err, "orders", "1", "moved")
	if !strings.Contains(err.Error(), "(move m1)") {
		t.Errorf("guard error %q does not name the move", err)
	}
	// Other buckets pass, without a warning.
	if err := e.mariaExec("s0", `UPDATE orders SET status = 'fine' WHERE user_id = 10`, `INSERT INTO orders (id, user_id) VALUES (900002, 2)`); err != nil {
		t.Fatalf("a write of another bucket was refused: %v", err)
	}
	// The mover's session passes.
	err = eng.withTx(ctx, e.db["s0"], func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, user_id) VALUES (900003, 9)`); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM orders WHERE id = 900003`)
		return err
	})
	if err != nil {
		t.Fatalf("the mover's session was refused: %v", err)
	}

	// A connection the mover used is the application's again.
	one, err := sql.Open("mysql", e.maria.PrimaryDSN(e.dbName["s0"]))
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	one.SetMaxOpenConns(1)
	if _, err := one.Exec(`SET SESSION time_zone = '+02:00'`); err != nil {
		t.Fatal(err)
	}
	if err := eng.withTx(ctx, one, func(tx *sql.Tx) error {
		var tz string
		var fk int
		if err := tx.QueryRowContext(ctx, `SELECT @@SESSION.time_zone, @@SESSION.foreign_key_checks`).Scan(&tz, &fk); err != nil {
			return err
		}
		if tz != "+00:00" || fk != 0 {
			t.Errorf("mover session: time_zone %s, foreign_key_checks %d; want +00:00 and 0", tz, fk)
		}
		_, err := tx.ExecContext(ctx, `UPDATE orders SET status = 'mover' WHERE user_id = 9`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var tz string
	var fk int
	var mover sql.NullString
	if err := one.QueryRow(`SELECT @@SESSION.time_zone, @@SESSION.foreign_key_checks, @freshread_mover`).Scan(&tz, &fk, &mover); err != nil {
		t.Fatal(err)
	}
	if tz != "+02:00" || fk != 1 || mover.Valid {
		t.Errorf("after the mover's session: time_zone %s, foreign_key_checks %d, @freshread_mover %v; want +02:00, 1, NULL", tz, fk, mover)
	}
	_, err = one.Exec(`INSERT INTO orders (id, user_id) VALUES (900004, 9)`)
	wantMariaGuard(t, err, "orders", "1", "moved")
	// Also when the mover's transaction failed.
	boom := errors.New("boom")
	if err := eng.withTx(ctx, one, func(*sql.Tx) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("withTx = %v, want boom", err)
	}
	_, err = one.Exec(`INSERT INTO orders (id, user_id) VALUES (900004, 9)`)
	wantMariaGuard(t, err, "orders", "1", "moved")

	// An incoming fence is the move's own: another move's is ErrBusy.
	install("s1", nbTest)
	if err := fence("s1", []int{1, 2}, FenceIncoming, "m1"); err != nil {
		t.Fatal(err)
	}
	wantMariaGuard(t, e.mariaExec("s1", `INSERT INTO order_items (order_id, line, user_id) VALUES (1, 9, 18)`), "order_items", "2", "incoming")
	if err := fence("s1", []int{2, 3}, FenceIncoming, "m2"); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "2 (m1)") {
		t.Fatalf("fencing another move's bucket: %v, want ErrBusy naming bucket 2 (m1)", err)
	}
	if err := fence("s1", []int{1, 2}, FenceIncoming, "m1"); err != nil { // idempotent
		t.Fatal(err)
	}

	// Unfenced, the buckets take writes again.
	if err := eng.unfence(ctx, e.db["s0"], "", []int{1}, FenceMoved, "m1"); err != nil {
		t.Fatal(err)
	}
	if err := eng.unfence(ctx, e.db["s1"], "", []int{1, 2}, FenceIncoming, "m1"); err != nil {
		t.Fatal(err)
	}
	if err := e.mariaExec("s0", `INSERT INTO orders (id, user_id) VALUES (900005, 9)`); err != nil {
		t.Fatal(err)
	}
	if ok, err := eng.hasFenceTable(ctx, e.db["s1"], ""); err != nil || !ok {
		t.Fatalf("hasFenceTable = %v, %v", ok, err)
	}

	// Installing again changes nothing; another bucket count replaces
	// every trigger.
	install("s0", nbTest)
	if again := e.mariaTriggers("s0"); !mapsEqual(again, first) {
		t.Fatalf("triggers changed by a second install:\n%v\n%v", again, first)
	}
	install("s0", 16)
	for n, b := range e.mariaTriggers("s0") {
		if b == first[n] || !strings.Contains(b, "% 16)") {
			t.Errorf("trigger %s not replaced for 16 buckets: %s", n, b)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// New takes MariaDB shards (the engine by the driver, the mover's tables
// in the connection's database) and refuses shards of two kinds in one
// Config.
func TestMariaDBConfig(t *testing.T) {
	maria, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/db")
	if err != nil {
		t.Fatal(err)
	}
	defer maria.Close()
	pg, err := sql.Open("pgx", "postgres://127.0.0.1:1/db")
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	cfg := func(dbs ...*sql.DB) Config {
		c := Config{Tables: testTables, Store: newMemStore(evenOwners("s0", "s1"))}
		for i, db := range dbs {
			c.Shards = append(c.Shards, Shard{Name: []string{"s0", "s1"}[i], DB: db})
		}
		return c
	}
	mv := Move{Buckets: []int{1}, From: "s0", To: "s1"}
	m, err := New(cfg(maria, maria), mv)
	if err != nil {
		t.Fatal(err)
	}
	if m.eng.name() != "MariaDB" || m.cfg.Schema != "" {
		t.Fatalf("engine %s, schema %q: want MariaDB and the connection's database", m.eng.name(), m.cfg.Schema)
	}
	if _, err := New(cfg(maria, pg), mv); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "one kind") {
		t.Fatalf("New with a MariaDB and a PostgreSQL shard: %v, want ErrConfig", err)
	}
	if m, err := New(cfg(pg, pg), mv); err != nil || m.eng.name() != "PostgreSQL" || m.cfg.Schema != "public" {
		t.Fatalf("New with PostgreSQL shards: %v", err)
	}
}
