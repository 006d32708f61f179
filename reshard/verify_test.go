package reshard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestVerifyDetectsCorruption: a row changed on the target behind the
// mover's back (a bit of one value) and a row deleted there are reported
// by Verify, per table and bucket; the switch then refuses to publish and
// rolls back (the source takes writes again); after the damage is
// repaired by a rollback and a new run, the move switches.
func TestVerifyDetectsCorruption(t *testing.T) { testVerifyDetectsCorruption(t, newEnv) }

// TestMariaDBVerifyDetectsCorruption is TestVerifyDetectsCorruption on
// MariaDB shards.
// TestMariaDBVerifyDetectsCorruption: testVerifyDetectsCorruption asserts.
func TestMariaDBVerifyDetectsCorruption(t *testing.T) {
	testVerifyDetectsCorruption(t, newMariaEnv)
}

func testVerifyDetectsCorruption(t *testing.T, mk newEnvFunc) {
	ctx := context.Background()
	owners := []string{"s0", "s0", "s0", "s0", "s1", "s1", "s1", "s1"}
	e := mk(t, []string{"s0", "s1"}, owners)
	e.seed(newLedger(), 1, 400)
	m := e.copiedMove(e.config(), Move{Buckets: []int{1, 2}, From: "s0", To: "s1"})
	if rep, err := m.Verify(ctx); err != nil || !rep.OK() || rep.Checked != 4 || rep.Rows == 0 {
		t.Fatalf("Verify after the copy: %+v, %v", rep, err)
	}
	var order, item, line int64
	if err := e.db["s1"].QueryRow(`SELECT min(id) FROM orders WHERE user_id % 8 = 1`).Scan(&order); err != nil {
		t.Fatal(err)
	}
	if err := e.db["s1"].QueryRow(`SELECT order_id, line FROM order_items WHERE user_id % 8 = 2 ORDER BY 1, 2 LIMIT 1`).Scan(&item, &line); err != nil {
		t.Fatal(err)
	}
	if err := e.moverExec("s1",
		fmt.Sprintf(`UPDATE orders SET amount = amount + 0.01 WHERE id = %d`, order),
		fmt.Sprintf(`DELETE FROM order_items WHERE order_id = %d AND line = %d`, item, line)); err != nil {
		t.Fatal(err)
	}
	rep, err := m.Verify(ctx)
	if !errors.Is(err, ErrVerify) || len(rep.Mismatches) != 2 {
		t.Fatalf("Verify after the damage: %+v, %v; want 2 mismatches and ErrVerify", rep, err)
	}
	for _, c := range rep.Mismatches {
		switch {
		case c.Table == "orders" && c.Bucket == 1 && c.SourceRows == c.TargetRows && c.SourceSum != c.TargetSum:
		case c.Table == "order_items" && c.Bucket == 2 && c.SourceRows == c.TargetRows+1:
		default:
			t.Errorf("unexpected mismatch %s", c)
		}
	}
	if !strings.Contains(err.Error(), "orders bucket 1") || !strings.Contains(err.Error(), "order_items bucket 2") {
		t.Errorf("the error does not name the tables and buckets: %v", err)
	}
	if _, err := m.Switch(ctx); !errors.Is(err, ErrVerify) {
		t.Fatalf("Switch with a damaged target: %v, want ErrVerify", err)
	}
	if f := e.fences("s0"); len(f) != 0 {
		t.Fatalf("the failed switch left fences on the source: %v", f)
	}
	if got := e.store.owners(); got[1] != "s0" {
		t.Fatalf("the failed switch published: %v", got)
	}
	if err := e.exec("s0", `UPDATE orders SET status = 'after' WHERE user_id = 9`); err != nil {
		t.Fatalf("the source refuses writes after the rolled-back switch: %v", err)
	}
	if st, _ := m.Status(ctx); st != "catching-up" {
		t.Fatalf("phase after the rolled-back switch: %q", st)
	}
	// Roll back (the copies are deleted) and run again.
	if err := m.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.count("s1", "orders", []int{1, 2}) + e.count("s1", "order_items", []int{1, 2}); n != 0 {
		t.Fatalf("%d rows left on the target after the rollback", n)
	}
	if f := e.fences("s1"); len(f) != 0 {
		t.Fatalf("fences left on the target after the rollback: %v", f)
	}
	if n := e.slots("s0"); n != 0 {
		t.Fatalf("%d slots left after the rollback", n)
	}
	if _, err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	e.sameRows("s0", "s1", []int{1, 2})
}

// TestForeignRow: a row of the target outside the moving buckets with the
// primary key of a row being copied stops the copy with ErrForeignRow,
// naming the table and the key, and is left as it was.
func TestForeignRow(t *testing.T) {
	ctx := context.Background()
	owners := []string{"s0", "s0", "s0", "s0", "s1", "s1", "s1", "s1"}
	e := newEnv(t, []string{"s0", "s1"}, owners)
	e.seed(newLedger(), 1, 400)
	// Order 9 is user 9's (bucket 1) on s0; s1 has an order 9 of its own,
	// for user 5 (bucket 5).
	if _, err := e.db["s1"].Exec(`INSERT INTO orders (id, user_id, status) VALUES (9, 5, 'mine')`); err != nil {
		t.Fatal(err)
	}
	m, err := e.copyError(e.config(), Move{Buckets: []int{1}, From: "s0", To: "s1"})
	if !errors.Is(err, ErrForeignRow) || !strings.Contains(err.Error(), "orders") || !strings.Contains(err.Error(), "(id)=(9)") {
		t.Fatalf("Copy = %v, want ErrForeignRow naming orders and (id)=(9)", err)
	}
	var status string
	if err := e.db["s1"].QueryRow(`SELECT status FROM orders WHERE id = 9`).Scan(&status); err != nil || status != "mine" {
		t.Fatalf("s1's order 9: %q %v", status, err)
	}
	if err := m.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.db["s1"].QueryRow(`SELECT status FROM orders WHERE id = 9`).Scan(&status); err != nil || status != "mine" {
		t.Fatalf("s1's order 9 after the rollback: %q %v", status, err)
	}
}
