package reshard

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"
)

// exec runs statements in one application transaction on a shard.
func (e *env) exec(shard string, stmts ...string) error {
	tx, err := e.db[shard].Begin()
	if err != nil {
		return err
	}
	for _, s := range stmts {
		if _, err := tx.Exec(s); err != nil {
			tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

func wantGuard(t *testing.T, err error, table, bucket, state string) {
	t.Helper()
	if !isGuard(err) {
		t.Fatalf("err = %v, want SQLSTATE FRB01", err)
	}
	for _, s := range []string{table, "bucket " + bucket + " ", state} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("guard error %q does not say %q", err, s)
		}
	}
}

// TestGuard: an application write to an incoming bucket on the target,
// and to a moving bucket on the source from the fence on (insert, update
// of the old or the new row's bucket, delete), is refused with FRB01
// naming the table, the bucket and the state; other buckets and the
// mover's own sessions pass. A REPEATABLE READ transaction whose snapshot
// predates the fence does not see it and writes anyway: the switch waits
// for it to end and carries its write over.
func TestGuard(t *testing.T) { testGuard(t, newEnv) }

// TestMariaDBGuardAcrossTheFence is TestGuard on MariaDB shards: the
// REPEATABLE READ transaction's snapshot (its read view) predates the
// fence, so the trigger's lookup does not see the fence; the switch's
// drain (INNODB_TRX) waits for it.
func TestMariaDBGuardAcrossTheFence(t *testing.T) { testGuard(t, newMariaEnv) }

func testGuard(t *testing.T, mk newEnvFunc) {
	ctx := context.Background()
	owners := []string{"s0", "s0", "s0", "s0", "s1", "s1", "s1", "s1"}
	e := mk(t, []string{"s0", "s1"}, owners)
	e.seed(newLedger(), 1, 400)
	cfg := e.config()
	m, err := New(cfg, Move{Buckets: []int{1}, From: "s0", To: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Prepare(ctx); err != nil { // idempotent
		t.Fatal(err)
	}
	// The target refuses the incoming bucket, takes the others, and lets
	// the mover through.
	wantGuard(t, e.exec("s1", `INSERT INTO orders (id, user_id) VALUES (900001, 9)`), "orders", "1", "incoming")
	wantGuard(t, e.exec("s1", `INSERT INTO order_items (order_id, line, user_id) VALUES (900001, 1, 17)`), "order_items", "1", "incoming")
	if err := e.exec("s1", `INSERT INTO orders (id, user_id) VALUES (900002, 5)`, `DELETE FROM orders WHERE id = 900002`); err != nil {
		t.Fatal(err)
	}
	if err := e.moverExec("s1", `INSERT INTO orders (id, user_id) VALUES (900003, 9)`, `DELETE FROM orders WHERE id = 900003`); err != nil {
		t.Fatalf("the mover's session was refused: %v", err)
	}
	if err := e.exec("s0", `UPDATE orders SET status = 'fine' WHERE user_id = 9`); err != nil {
		t.Fatalf("the source refused a write before the switch: %v", err)
	}
	if _, err := m.Copy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}

	// A REPEATABLE READ transaction on the source, its snapshot taken
	// before the fence.
	rr, err := e.db["s0"].BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	var one int
	if err := rr.QueryRow(`SELECT 1 FROM orders LIMIT 1`).Scan(&one); err != nil {
		t.Fatal(err)
	}
	committed := make(chan error, 1)
	var checks []error
	m.hook = func(point string) error {
		if point != "switch:fenced" {
			return nil
		}
		check := func(err error, bucket string) {
			if !isGuard(err) || !strings.Contains(err.Error(), "bucket "+bucket+" is moved") {
				checks = append(checks, err)
			}
		}
		check(e.exec("s0", `UPDATE orders SET status = 'late' WHERE user_id = 9`), "1")
		check(e.exec("s0", `DELETE FROM order_items WHERE user_id = 17`), "1")
		check(e.exec("s0", `INSERT INTO orders (id, user_id) VALUES (900004, 25)`), "1")
		check(e.exec("s0", `UPDATE orders SET user_id = 9 WHERE user_id = 8`), "1") // into the moving bucket
		check(e.exec("s0", `UPDATE orders SET user_id = 8 WHERE user_id = 9`), "1") // out of it
		if err := e.exec("s0", `UPDATE orders SET status = 'other bucket' WHERE user_id = 10`); err != nil {
			checks = append(checks, err)
		}
		if _, err := rr.Exec(`UPDATE orders SET status = 'repeatable' WHERE user_id = 17`); err != nil {
			checks = append(checks, err)
		}
		go func() {
			time.Sleep(100 * time.Millisecond)
			committed <- rr.Commit()
		}()
		return nil
	}
	rep, err := m.Switch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	for _, err := range checks {
		t.Errorf("during the hold: %v", err)
	}
	t.Logf("hold %v, drain %v", rep.Hold, rep.Drain)
	var got []string
	rows, err := e.db["s1"].Query(`SELECT DISTINCT status FROM orders WHERE user_id = 17`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		rows.Scan(&s)
		got = append(got, s)
	}
	rows.Close()
	if len(got) != 1 || got[0] != "repeatable" {
		t.Fatalf("user 17's orders on s1: %v, want the REPEATABLE READ transaction's write", got)
	}
	// After the switch the target takes the bucket and the source refuses
	// it for good, also after the cleanup.
	if err := e.exec("s1", `INSERT INTO orders (id, user_id) VALUES (900005, 9)`); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.count("s0", "orders", []int{1}); n != 0 {
		t.Errorf("%d orders of bucket 1 left on s0", n)
	}
	wantGuard(t, e.exec("s0", `INSERT INTO orders (id, user_id) VALUES (900006, 9)`), "orders", "1", "moved")
}
