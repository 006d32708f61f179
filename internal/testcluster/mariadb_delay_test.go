package testcluster_test

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/testcluster"
)

// slaveStatus returns the column of SHOW SLAVE STATUS named col.
func slaveStatus(t *testing.T, db *sql.DB, col string) string {
	t.Helper()
	rows, err := db.Query("SHOW SLAVE STATUS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	if !rows.Next() {
		t.Fatalf("SHOW SLAVE STATUS: no row (err %v)", rows.Err())
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		t.Fatal(err)
	}
	for i, c := range cols {
		if c == col {
			return vals[i].String
		}
	}
	t.Fatalf("SHOW SLAVE STATUS has no column %s", col)
	return ""
}

func TestMariaDBApplyDelay(t *testing.T) {
	m := testcluster.MariaDBFor(t)
	ctx := ctxT(t)
	for _, bad := range []time.Duration{1500 * time.Millisecond, 20 * time.Millisecond, -time.Second} {
		err := m.SetApplyDelay(ctx, bad)
		if err == nil || !strings.Contains(err.Error(), "whole") {
			t.Fatalf("SetApplyDelay(%v): err %v, want a whole-seconds error", bad, err)
		}
	}
	name := m.CreateDatabase(t)
	primary := open(t, "mysql", m.PrimaryDSN(name))
	replica := open(t, "mysql", m.ReplicaDSN(name))
	mustExec(t, primary, "CREATE TABLE kv (k int PRIMARY KEY, v varchar(10))")
	mustExec(t, primary, "INSERT INTO kv VALUES (1, 'old')")
	if err := m.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}

	if err := m.SetApplyDelay(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.SetApplyDelay(ctxT(t), 0); err != nil {
			t.Errorf("reset the delay: %v", err)
		}
	})
	if got := slaveStatus(t, replica, "SQL_Delay"); got != "1" {
		t.Fatalf("SQL_Delay = %q, want 1", got)
	}
	// MASTER_DELAY compares whole seconds: commit early in a second so the
	// write stays invisible for about a second.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
	committed := time.Now()
	mustExec(t, primary, "UPDATE kv SET v = 'new' WHERE k = 1")
	if got := readValue(t, replica, "SELECT v FROM kv WHERE k = 1"); got != "old" {
		t.Fatalf("replica %v after commit with a 1s delay: got %q, want old", time.Since(committed), got)
	}
	if err := m.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	visible := time.Since(committed)
	if got := readValue(t, replica, "SELECT v FROM kv WHERE k = 1"); got != "new" {
		t.Fatalf("replica after WaitCaughtUp: got %q, want new", got)
	}
	t.Logf("write visible on the replica %v after commit", visible.Round(time.Millisecond))
	if visible < 500*time.Millisecond {
		t.Errorf("write visible after %v, want about 1s", visible)
	}

	if err := m.SetApplyDelay(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if got := slaveStatus(t, replica, "SQL_Delay"); got != "0" {
		t.Fatalf("SQL_Delay after reset = %q, want 0", got)
	}
}
