package reshard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// heldCommit is a transaction of shard s whose commit is flushed (its
// changes can be decoded) but not yet visible: its session commits with
// synchronous_commit = remote_apply to a synchronous standby whose replay
// is paused. Every other session (synchronous_commit = on, as the mover's)
// only waits for the standby to flush, which it still does.
type heldCommit struct {
	e         *env
	s         string
	committed chan error
	probed    chan error // the probe commit that waited
	released  bool
}

// holdCommit runs stmts in a transaction on shard s and returns once its
// commit waits for the standby.
func (e *env) holdCommit(s string, stmts ...string) *heldCommit {
	e.t.Helper()
	ctx := context.Background()
	h := &heldCommit{e: e, s: s, committed: make(chan error, 1)}
	if _, err := e.db[s].Exec(`CREATE TABLE IF NOT EXISTS freshread_sync_probe (x int)`); err != nil {
		e.t.Fatal(err)
	}
	conn, probe := e.syncConn(s), e.syncConn(s)
	var pid, probePid int
	if err := conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		e.t.Fatal(err)
	}
	if err := probe.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&probePid); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { h.release() })
	for i := range e.pg.Replicas() {
		if err := e.pg.PauseReplay(ctx, i); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := h.setStandby("*"); err != nil {
		e.t.Fatal(err)
	}
	// A backend sees the setting once SHOW says so, but its commits wait
	// only once the checkpointer has read it too: until a probe's commit
	// waits for the standby, probe again.
	waitFor(e.t, "the session to read the configuration", func() (bool, error) {
		var v string
		err := conn.QueryRowContext(ctx, `SHOW synchronous_standby_names`).Scan(&v)
		return v == "*", err
	})
	waitFor(e.t, "a probe's commit to wait for the standby", func() (bool, error) {
		done := make(chan error, 1)
		go func() {
			_, err := probe.ExecContext(ctx, `INSERT INTO freshread_sync_probe VALUES (1)`)
			done <- err
		}()
		for {
			select {
			case err := <-done:
				return false, err // committed without waiting: not yet
			case <-time.After(20 * time.Millisecond):
			}
			if e.syncWaiting(s, probePid) {
				h.probed = done
				return true, nil
			}
		}
	})
	go func() {
		h.committed <- func() error {
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			for _, q := range stmts {
				if _, err := tx.ExecContext(ctx, q); err != nil {
					return err
				}
			}
			return tx.Commit()
		}()
	}()
	waitFor(e.t, "the commit to wait for the standby", func() (bool, error) {
		return e.syncWaiting(s, pid), nil
	})
	return h
}

// syncConn is a session of shard s whose commits wait until a synchronous
// standby has applied them.
func (e *env) syncConn(s string) *sql.Conn {
	e.t.Helper()
	conn, err := e.db[s].Conn(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	if _, err := conn.ExecContext(context.Background(), `SET synchronous_commit = remote_apply`); err != nil {
		e.t.Fatal(err)
	}
	return conn
}

// syncWaiting reports whether backend pid of shard s waits for the
// synchronous standby.
func (e *env) syncWaiting(s string, pid int) bool {
	var n int
	err := e.db[s].QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep'`, pid).Scan(&n)
	return err == nil && n == 1
}

func (h *heldCommit) setStandby(names string) error {
	if _, err := h.e.db[h.s].Exec(fmt.Sprintf(`ALTER SYSTEM SET synchronous_standby_names = '%s'`, names)); err != nil {
		return err
	}
	_, err := h.e.db[h.s].Exec(`SELECT pg_reload_conf()`)
	return err
}

// release lets the commit finish and waits for it.
func (h *heldCommit) release() error {
	if h.released {
		return nil
	}
	h.released = true
	err := h.setStandby("")
	for i := range h.e.pg.Replicas() {
		if rerr := h.e.pg.ResumeReplay(context.Background(), i); err == nil {
			err = rerr
		}
	}
	if err != nil {
		return err
	}
	if h.probed != nil {
		if err := <-h.probed; err != nil {
			return fmt.Errorf("the probe: %w", err)
		}
	}
	return <-h.committed
}

// TestCatchUpWaitsForDecodedCommits: PostgreSQL flushes a transaction's
// commit record (so logical decoding returns its changes) before the
// transaction is visible to other sessions' snapshots. A catch-up that
// re-read a decoded DELETE's row in that window found the row still there,
// copied it to the target and advanced the slot past the DELETE: the
// target kept a row the source had deleted (the switch's verification
// caught it once in CI). Without the wait this test fails all three ways.
func TestCatchUpWaitsForDecodedCommits(t *testing.T) {
	ctx := context.Background()
	owners := []string{"s0", "s0", "s0", "s0", "s1", "s1", "s1", "s1"}
	e := newEnv(t, []string{"s0", "s1"}, owners)
	e.seed(newLedger(), 1, 200)
	m := e.copiedMove(e.config(), Move{Buckets: []int{1}, From: "s0", To: "s1"})

	var id int64
	if err := e.db["s0"].QueryRow(`SELECT min(id) FROM orders WHERE user_id % 8 = 1`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	h := e.holdCommit("s0", fmt.Sprintf(`DELETE FROM order_items WHERE order_id = %d`, id), fmt.Sprintf(`DELETE FROM orders WHERE id = %d`, id))
	// Committed in the WAL, not yet visible.
	var visible int
	if err := e.db["s0"].QueryRow(`SELECT count(*) FROM orders WHERE id = $1`, id).Scan(&visible); err != nil || visible != 1 {
		t.Fatalf("the held DELETE's row: %d rows, %v; want still visible", visible, err)
	}

	caughtUp := make(chan error, 1)
	go func() {
		_, err := m.CatchUp(ctx)
		caughtUp <- err
	}()
	select {
	case err := <-caughtUp:
		// A catch-up may only finish once it has applied the DELETE, which
		// it cannot see yet.
		t.Errorf("the catch-up finished (%v) while a change it decoded was not visible on the source", err)
		caughtUp <- err
	case <-time.After(time.Second):
	}
	if err := h.release(); err != nil {
		t.Fatalf("the DELETE: %v", err)
	}
	if err := <-caughtUp; err != nil {
		t.Fatal(err)
	}
	if _, err := m.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := e.db["s1"].QueryRow(`SELECT count(*) FROM orders WHERE id = $1`, id).Scan(&n); err != nil || n != 0 {
		t.Errorf("the target holds %d rows of the deleted order %d (%v), want 0", n, id, err)
	}
	if rep, err := m.Verify(ctx); err != nil || !rep.OK() {
		t.Errorf("Verify after the catch-up: %+v, %v", rep, err)
	}
}

// TestAwaitEndedWaitsForHeldCommit: the wait Prepare makes after creating
// the slot does not end while a transaction that was running (here: one
// whose commit is flushed but not visible) is still running, and ends once
// it is visible.
func TestAwaitEndedWaitsForHeldCommit(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, []string{"s0"}, evenOwners("s0"))
	e.seed(newLedger(), 1, 10)
	h := e.holdCommit("s0", `UPDATE orders SET status = 'held' WHERE id = 1`)
	f, err := readInFlight(ctx, e.db["s0"])
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := awaitEnded(short, e.db["s0"], f, 5*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "still running (pid ") {
		t.Fatalf("awaitEnded with a commit held: %v, want it to wait until its context ends and name the session", err)
	}
	if err := h.release(); err != nil {
		t.Fatal(err)
	}
	if err := awaitEnded(ctx, e.db["s0"], f, 5*time.Millisecond); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotPending covers parseSnapshot, fullXid and pendingIn without
// a server, around the 32-bit wraparound of transaction ids.
func TestSnapshotPending(t *testing.T) {
	s, err := parseSnapshot("4294967290:4294967300:4294967292,4294967298")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		xid  uint32
		want uint64
	}{{4294967292, 4294967292}, {2, 4294967298}, {100, 4294967396}, {4294967000, 4294967000}} {
		if got := fullXid(s.xmax, c.xid); got != c.want {
			t.Errorf("fullXid(%d, %d) = %d, want %d", s.xmax, c.xid, got, c.want)
		}
	}
	if got := fullXid(10, 4294967290); got != 0 {
		t.Errorf("fullXid before the first epoch = %d, want 0", got)
	}
	for _, c := range []struct {
		f       inFlight
		pending bool
	}{
		{inFlight{xip: []uint64{4294967292}}, true},                     // in xip
		{inFlight{xip: []uint64{4294967293}}, false},                    // ended
		{inFlight{xip: []uint64{4294967000}}, false},                    // before xmin
		{inFlight{xip: []uint64{4294967300}}, true},                     // at xmax
		{inFlight{from: 4294967299, to: 4294967300}, false},             // below xmax, not in xip
		{inFlight{from: 4294967295, to: 4294967300}, true},              // holds 4294967298
		{inFlight{from: 4294967299, to: 4294967302}, true},              // reaches past xmax
		{inFlight{xip: []uint64{1, 4294967293}, from: 5, to: 5}, false}, // empty range
	} {
		if _, got := s.pendingIn(c.f); got != c.pending {
			t.Errorf("pendingIn(%+v) = %v, want %v", c.f, got, c.pending)
		}
	}
	for _, bad := range []string{"", "1:2", "a:2:", "1:b:", "1:2:x", "3:2:"} {
		if _, err := parseSnapshot(bad); err == nil {
			t.Errorf("parseSnapshot(%q) accepted", bad)
		}
	}
}

// waitFor polls cond for up to 30 seconds.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
