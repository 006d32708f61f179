package reshard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/freshread/freshread/sharding"
)

// mariaRowsOf returns every row of table in buckets on a shard, each as
// the text of all its columns, in primary key order.
func (e *env) mariaRowsOf(shard, table, order string, buckets []int) []string {
	e.t.Helper()
	in := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(buckets)), ", "), "[]")
	rows, err := e.db[shard].Query(fmt.Sprintf("SELECT * FROM %s WHERE (user_id %% %d) IN (%s) ORDER BY %s", table, nbTest, in, order))
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals, err := scanNullStrings(rows, len(cols))
		if err != nil {
			e.t.Fatal(err)
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			parts[i] = "NULL"
			if v.Valid {
				parts[i] = fmt.Sprintf("%q", v.String)
			}
		}
		out = append(out, strings.Join(parts, " "))
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// mariaSame checks that the moving buckets' rows are the same on the
// source and the target, column for column.
func (e *env) mariaSame(from, to string, buckets []int) {
	e.t.Helper()
	for _, tb := range []struct{ name, order string }{{"orders", "id"}, {"order_items", "order_id, line"}} {
		src, dst := e.mariaRowsOf(from, tb.name, tb.order, buckets), e.mariaRowsOf(to, tb.name, tb.order, buckets)
		if len(src) == 0 {
			e.t.Fatalf("no %s in buckets %v on %s", tb.name, buckets, from)
		}
		if !slices.Equal(src, dst) {
			bad := 0
			for i := 0; i < max(len(src), len(dst)) && bad < 5; i++ {
				var s, d string
				if i < len(src) {
					s = src[i]
				}
				if i < len(dst) {
					d = dst[i]
				}
				if s != d {
					e.t.Errorf("%s row %d:\n  %s: %s\n  %s: %s", tb.name, i, from, s, to, d)
					bad++
				}
			}
			e.t.Fatalf("%s: %d rows on %s, %d on %s, not the same", tb.name, len(src), from, len(dst), to)
		}
	}
}

// TestMariaDBCatchUpUnderWrites: on MariaDB, four writers insert, update
// and delete orders and items in every bucket while the mover prepares
// (the binlog position of a consistent snapshot), copies (slowly: the
// writes land between the chunks) and catches up from the binlog; once
// they stop and a last catch-up ran, the moving buckets' rows on the
// target are the source's, every column, and Verify agrees.
func TestMariaDBCatchUpUnderWrites(t *testing.T) {
	ctx := context.Background()
	e := newMariaEnv(t, []string{"s0", "s1"}, evenOwners("s0", "s1"))
	l := newLedger()
	e.mariaSeed(l, 1, 600)
	cfg := e.config()
	cfg.ChunkRows, cfg.ApplyChanges = 40, 50
	chunks := 0
	cfg.Progress = func(p Progress) {
		if p.Phase == "copying" {
			chunks++
			time.Sleep(20 * time.Millisecond)
		}
	}
	buckets := []int{1, 2}
	m, err := New(cfg, Move{Buckets: buckets, From: "s0", To: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	ws := e.startWriters(l, 4, time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	if err := m.Prepare(ctx); err != nil {
		ws.stop()
		t.Fatal(err)
	}
	prepared := time.Now()
	before, _ := ws.totals()
	cp, err := m.Copy(ctx)
	if err != nil {
		ws.stop()
		t.Fatal(err)
	}
	during, _ := ws.totals()
	cu, err := m.CatchUp(ctx)
	if err != nil {
		ws.stop()
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := ws.stop(); err != nil {
		t.Fatal(err)
	}
	after, _ := ws.totals()
	last, err := m.CatchUp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("copy: %d rows in %d chunks, %v, %d writes during it; catch-up: %d rounds, %d changes, %d rows; then %d writes; last catch-up: %d changes",
		cp.Rows, chunks, cp.Duration.Round(time.Millisecond), during-before, cu.Rounds, cu.Changes, cu.Rows, after-during, last.Changes)
	if n := ws.installRaces(t, prepared); n > 0 {
		t.Logf("%d writers met MDEV-26048 while the guard was installed", n)
	}
	if during-before < 20 || cu.Changes == 0 {
		t.Fatalf("%d writes during the copy, %d changes caught up: the test did not write during the move", during-before, cu.Changes)
	}
	e.mariaSame("s0", "s1", buckets)
	vr, err := m.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if vr.Checked != 4 || vr.Rows == 0 {
		t.Fatalf("verify: %+v", vr)
	}
	if st, err := m.Status(ctx); err != nil || st != sharding.MoveCatchingUp {
		t.Fatalf("status %q, %v", st, err)
	}
}

// mariaWrite runs one application transaction on a shard and returns its
// GTID.
func (e *env) mariaWrite(ctx context.Context, shard string, stmts ...string) string {
	e.t.Helper()
	conn, err := e.db[shard].Conn(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			tx.Rollback()
			e.t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		e.t.Fatal(err)
	}
	var g string
	if err := conn.QueryRowContext(ctx, `SELECT @@last_gtid`).Scan(&g); err != nil {
		e.t.Fatal(err)
	}
	return g
}

// TestMariaDBCatchUpResume: the catch-up records its binlog position on
// the target in the same transaction as the rows. A mover that dies after
// reading a batch's rows, before the target's commit, and one that dies
// right after a commit, leave a position from which a new mover applies
// every transaction of the moving buckets exactly once in all: none of
// those applied before a crash again, none lost.
func TestMariaDBCatchUpResume(t *testing.T) {
	ctx := context.Background()
	e := newMariaEnv(t, []string{"s0", "s1"}, evenOwners("s0", "s1"))
	e.mariaSeed(newLedger(), 1, 200)
	cfg := e.config()
	cfg.ApplyChanges = 10 // five of the transactions below
	buckets := []int{1, 2}
	mv := Move{Buckets: buckets, From: "s0", To: "s1"}
	m1 := e.copiedMove(cfg, mv)

	// 40 transactions in the moving buckets, each updating an order and
	// inserting one (two changes), and 10 in bucket 3, which does not move.
	ids := func(bs string) []int64 {
		var out []int64
		rows, err := e.db["s0"].Query(`SELECT id FROM orders WHERE (user_id % 8) IN (` + bs + `) ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			rows.Scan(&id)
			out = append(out, id)
		}
		return out
	}
	moving, other := ids("1, 2"), ids("3")
	var written, all []string // the moving buckets' transactions; every one
	for i := 0; i < 50; i++ {
		id, user := moving[i%len(moving)], int64(1+8*(i%10)+i%2) // buckets 1 and 2
		if i%5 == 4 {
			id, user = other[i%len(other)], int64(3+8*(i%10))
		}
		g := e.mariaWrite(ctx, "s0", fmt.Sprintf(`UPDATE orders SET status = 'w%d', amount = amount + 1 WHERE id = %d`, i, id),
			fmt.Sprintf(`INSERT INTO orders (id, user_id, status) VALUES (%d, %d, 'new')`, 700000+i, user))
		all = append(all, g)
		if i%5 != 4 {
			written = append(written, g)
		}
	}

	applied := map[string]int{} // GTID -> the run that applied it
	hook := func(run int, crash func(point string, batch int) bool) func(string) error {
		batch := 0
		return func(p string) error {
			if g, ok := strings.CutPrefix(p, "apply:txn "); ok {
				if r, seen := applied[g]; seen {
					return fmt.Errorf("transaction %s applied by run %d and again by run %d", g, r, run)
				}
				applied[g] = run
			}
			if p == "apply:read" || p == "apply:committed" {
				if p == "apply:read" {
					batch++
				}
				if crash(p, batch) {
					return errCrash
				}
			}
			return nil
		}
	}
	// Run 1 dies after reading the third batch's rows, before writing them.
	m1.hook = hook(1, func(p string, b int) bool { return p == "apply:read" && b == 3 })
	if _, err := m1.CatchUp(ctx); !errors.Is(err, errCrash) {
		t.Fatalf("run 1: %v, want the crash", err)
	}
	st, err := m1.readState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(applied); n != 10 {
		t.Fatalf("run 1 applied %d transactions before dying in the third batch, want 10", n)
	}
	// (The transactions of bucket 3 change a moving table too: the
	// catch-up reads their rows and finds them outside the move.)
	if want := all[9]; !strings.Contains(st.appliedPos, want) {
		t.Fatalf("applied position after run 1: %s, want the second batch's last transaction %s", st.appliedPos, want)
	}

	// Run 2 dies right after the commit of its second batch.
	m2, err := New(cfg, mv)
	if err != nil {
		t.Fatal(err)
	}
	m2.hook = hook(2, func(p string, b int) bool { return p == "apply:committed" && b == 2 })
	if _, err := m2.CatchUp(ctx); !errors.Is(err, errCrash) {
		t.Fatalf("run 2: %v, want the crash", err)
	}
	if n := len(applied); n != 20 {
		t.Fatalf("%d transactions applied after run 2's two batches, want 20", n)
	}

	// Run 3 finishes.
	m3, err := New(cfg, mv)
	if err != nil {
		t.Fatal(err)
	}
	m3.hook = hook(3, func(string, int) bool { return false })
	rep, err := m3.CatchUp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var lost []string
	for _, g := range written {
		if _, ok := applied[g]; !ok {
			lost = append(lost, g)
		}
	}
	if len(lost) > 0 || len(applied) != len(all) {
		t.Fatalf("transactions never applied: %v; %d applied, %d written", lost, len(applied), len(all))
	}
	t.Logf("run 3: %d rounds, %d changes", rep.Rounds, rep.Changes)
	e.mariaSame("s0", "s1", buckets)
}

// TestMariaDBCatchUpWaitsForVisibleCommits: a transaction is in the
// binlog (and sent to binlog readers) before its commit is visible; with
// semi-synchronous replication waiting after the binlog's sync
// (AFTER_SYNC) and no replica to acknowledge, that lasts until the
// semi-sync timeout. A DELETE held so: the catch-up reads it from the
// binlog at once but does not re-read its rows until a snapshot of the
// source sees it, so the target does not keep the deleted rows.
func TestMariaDBCatchUpWaitsForVisibleCommits(t *testing.T) {
	ctx := context.Background()
	e := newMariaEnv(t, []string{"s0", "s1"}, evenOwners("s0", "s1"))
	e.mariaSeed(newLedger(), 1, 100)
	m := e.copiedMove(e.config(), Move{Buckets: []int{1}, From: "s0", To: "s1"})
	var id int64
	if err := e.db["s0"].QueryRow(`SELECT id FROM orders WHERE user_id % 8 = 1 ORDER BY id LIMIT 1`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	global := func(stmts ...string) {
		t.Helper()
		for _, s := range stmts {
			if _, err := e.db["s0"].Exec(s); err != nil {
				t.Fatal(err)
			}
		}
	}
	global(`SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC`, `SET GLOBAL rpl_semi_sync_master_timeout = 3000`, `SET GLOBAL rpl_semi_sync_master_enabled = ON`)
	defer global(`SET GLOBAL rpl_semi_sync_master_enabled = OFF`)
	var before string
	if err := e.db["s0"].QueryRow(`SELECT @@gtid_binlog_pos`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	committed := make(chan time.Time, 1)
	go func() {
		err := e.mariaExec("s0", fmt.Sprintf(`DELETE FROM order_items WHERE order_id = %d`, id), fmt.Sprintf(`DELETE FROM orders WHERE id = %d`, id))
		if err != nil {
			t.Error(err)
		}
		committed <- time.Now()
	}()
	// The DELETE is in the binlog, and not visible.
	deadline := time.Now().Add(2 * time.Second)
	for {
		var pos string
		if err := e.db["s0"].QueryRow(`SELECT @@gtid_binlog_pos`).Scan(&pos); err != nil {
			t.Fatal(err)
		}
		if pos != before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the DELETE did not reach the binlog")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var n int
	if err := e.db["s0"].QueryRow(`SELECT COUNT(*) FROM orders WHERE id = ?`, id).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the order is visible %d times (%v) while its DELETE waits for the semi-sync acknowledgement: the test's premise fails", n, err)
	}
	start := time.Now()
	rep, err := m.CatchUp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := time.Now()
	at := <-committed
	t.Logf("the DELETE committed %v after the catch-up began; the catch-up ended %v after it (%d rounds, %d changes)",
		at.Sub(start).Round(time.Millisecond), done.Sub(at).Round(time.Millisecond), rep.Rounds, rep.Changes)
	if done.Before(at) {
		t.Fatalf("the catch-up ended %v before the DELETE was visible", at.Sub(done))
	}
	if err := e.db["s1"].QueryRow(`SELECT COUNT(*) FROM orders WHERE id = ?`, id).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the target keeps %d copies of the deleted order (%v)", n, err)
	}
	e.mariaSame("s0", "s1", []int{1})
}

// TestMariaDBTypesExact: edge values of the MariaDB tests' column types
// (NULLs, the largest unsigned BIGINT, doubles and floats that need every
// digit, -0, decimals with their scale, JSON with escapes and non-ASCII
// text, every byte value in a BLOB, microseconds, TIMESTAMPs written in
// another time zone, negative and long TIMEs, ENUM values with a quote)
// are copied and caught up exactly (every column's text equal on both
// sides), with a primary key change, rows into and out of the moving
// bucket, a delete and a TRUNCATE among the changes.
func TestMariaDBTypesExact(t *testing.T) {
	ctx := context.Background()
	e := newMariaEnv(t, []string{"s0", "s1"}, evenOwners("s0", "s1"))
	e.mariaSeed(newLedger(), 1, 40)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	edge := func(id, user int64, status string) {
		t.Helper()
		conn, err := e.db["s0"].Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, `SET SESSION time_zone = '-07:00'`); err != nil {
			t.Fatal(err)
		}
		_, err = conn.ExecContext(ctx, `INSERT INTO orders (id, user_id, status, amount, price, ratio, attrs, tags, blob_col, created_at, stamped, due, span, flag, uid, kind, big)
 VALUES (?, ?, ?, -9999999999.99, 0.30000000000000004, 3.4028234e38, ?, 'tab\there', ?,
 '1000-01-01 00:00:00.000001', '2038-01-18 20:14:07.999999', '9999-12-31', '-838:59:59.999', 0, 'f47ac10b-58cc-4372-a567-0e02b2c3d479', 'it''s', 18446744073709551615)`,
			id, user, status, `{"q": "it's \"quoted\"", "u": "é中😀", "esc": "\u00e9\ud83d\ude00", "n": 1.0e-7}`, all)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, `INSERT INTO order_items (order_id, line, user_id, sku, qty) VALUES (?, 1, ?, NULL, -2147483648)`, id, user); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, `SET SESSION time_zone = DEFAULT`); err != nil {
			t.Fatal(err)
		}
	}
	edge(800001, 9, "edge")                                                                                        // bucket 1
	if err := e.mariaExec("s0", `INSERT INTO orders (id, user_id, price) VALUES (800002, 17, -0e0)`); err != nil { // NULLs but the price
		t.Fatal(err)
	}
	cfg := e.config()
	cfg.ChunkRows = 7
	buckets := []int{1}
	m := e.copiedMove(cfg, Move{Buckets: buckets, From: "s0", To: "s1"})
	e.mariaSame("s0", "s1", buckets)

	// Changes for the catch-up.
	edge(800003, 25, "edge again")
	for _, stmts := range [][]string{
		{`UPDATE orders SET price = 5e-324, ratio = 1.17549435e-38, amount = 0.01, attrs = JSON_SET(attrs, '$.v', 'x'), stamped = NULL WHERE id = 800001`},
		{`DELETE FROM order_items WHERE order_id = 800003`, `UPDATE orders SET id = 800004 WHERE id = 800003`}, // a key change
		{`UPDATE orders SET user_id = 10 WHERE id = 800002`},                                                   // out of the bucket
		{`UPDATE orders SET user_id = 33 WHERE user_id = 2`},                                                   // into it
		{`DELETE FROM order_items WHERE order_id = (SELECT MIN(id) FROM orders WHERE user_id = 41)`},
		{`TRUNCATE TABLE order_items`},
		{`INSERT INTO order_items (order_id, line, user_id, sku, qty) VALUES (800001, 2, 9, 'after the truncate', 1)`},
	} {
		if err := e.mariaExec("s0", stmts...); err != nil {
			t.Fatalf("%v: %v", stmts, err)
		}
	}
	rep, err := m.CatchUp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("catch-up: %d rounds, %d changes, %d rows", rep.Rounds, rep.Changes, rep.Rows)
	e.mariaSame("s0", "s1", buckets)
	if vr, err := m.Verify(ctx); err != nil {
		t.Fatalf("verify: %v (%+v)", err, vr)
	}
	var n int
	if err := e.db["s1"].QueryRow(`SELECT COUNT(*) FROM order_items WHERE user_id % 8 = 1`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d items of bucket 1 on the target after the TRUNCATE and one insert (%v), want 1", n, err)
	}
}

// TestMariaDBForeignRow: a target row outside the moving buckets with a
// moving row's primary key fails the copy with ErrForeignRow naming it,
// and is left as it was, also by the rollback.
func TestMariaDBForeignRow(t *testing.T) {
	ctx := context.Background()
	e := newMariaEnv(t, []string{"s0", "s1"}, evenOwners("s0", "s1"))
	e.mariaSeed(newLedger(), 1, 40)
	var id int64
	if err := e.db["s0"].QueryRow(`SELECT MAX(id) FROM orders WHERE user_id % 8 = 1`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db["s1"].Exec(`INSERT INTO orders (id, user_id, status) VALUES (?, 4, 'foreign')`, id); err != nil {
		t.Fatal(err)
	}
	m, err := e.copyError(e.config(), Move{Buckets: []int{1}, From: "s0", To: "s1"})
	if !errors.Is(err, ErrForeignRow) || !strings.Contains(err.Error(), fmt.Sprintf("(id)=(%d) with user_id 4", id)) {
		t.Fatalf("copy: %v, want ErrForeignRow naming (id)=(%d) with user_id 4", err, id)
	}
	var status string
	var user int64
	for _, when := range []string{"after the copy", "after the rollback"} {
		if err := e.db["s1"].QueryRow(`SELECT status, user_id FROM orders WHERE id = ?`, id).Scan(&status, &user); err != nil || status != "foreign" || user != 4 {
			t.Fatalf("the target's row %s: %s, user %d (%v); want it untouched", when, status, user, err)
		}
		if err := m.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMariaDBBinlogPurged: binlogs purged past the position the target
// recorded are ErrSlotLost, as a dropped slot on PostgreSQL; the move then
// rolls back (the copies deleted, the fence removed).
func TestMariaDBBinlogPurged(t *testing.T) {
	ctx := context.Background()
	e := newMariaEnv(t, []string{"s0", "s1"}, evenOwners("s0", "s1"))
	e.mariaSeed(newLedger(), 1, 20)
	m := e.copiedMove(e.config(), Move{Buckets: []int{1}, From: "s0", To: "s1"})
	if err := e.mariaExec("s0", `UPDATE orders SET status = 'later' WHERE user_id % 8 = 1`); err != nil {
		t.Fatal(err)
	}
	// Purge every binlog but a new one, once the replica has read them.
	if _, err := e.db["s0"].Exec(`FLUSH BINARY LOGS`); err != nil {
		t.Fatal(err)
	}
	if err := e.maria.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	_, at, err := binlogPosition(ctx, e.db["s0"])
	if err != nil {
		t.Fatal(err)
	}
	// A binlog is kept until its binlog checkpoint is written, a moment
	// after the rotation: purge until the current one is the oldest.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := e.db["s0"].Exec(`PURGE BINARY LOGS TO '` + at.file + `'`); err != nil {
			t.Fatal(err)
		}
		var first string
		rows, err := e.db["s0"].Query(`SHOW BINARY LOGS`)
		if err != nil {
			t.Fatal(err)
		}
		if rows.Next() {
			var size any
			rows.Scan(&first, &size)
		}
		rows.Close()
		if first == at.file {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the oldest binlog is still %s, not %s", first, at.file)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := m.CatchUp(ctx); !errors.Is(err, ErrSlotLost) {
		t.Fatalf("catch-up after the purge: %v, want ErrSlotLost", err)
	}
	// Rolled back, the target holds nothing of the bucket and fences
	// nothing.
	if err := m.Rollback(ctx); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	for _, table := range []string{"orders", "order_items"} {
		var n int
		if err := e.db["s1"].QueryRow(`SELECT COUNT(*) FROM ` + table + ` WHERE user_id % 8 = 1`).Scan(&n); err != nil || n != 0 {
			t.Errorf("%d %s of bucket 1 left on the target after the rollback (%v)", n, table, err)
		}
	}
	if f := e.fences("s1"); len(f) != 0 {
		t.Errorf("fences left on the target: %v", f)
	}
	if st, err := m.Status(ctx); err != nil || st != sharding.MoveRolledBack {
		t.Errorf("status %q (%v), want rolled back", st, err)
	}
}
