package testcluster_test

import (
	"database/sql"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/harness/testcluster"
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

// visibleAfter polls the replica every 2 ms until q returns want and
// returns how long after committed that was.
func visibleAfter(t *testing.T, replica *sql.DB, q, want string, committed time.Time) time.Duration {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if got := readValue(t, replica, q); got == want {
			return time.Since(committed)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on the replica: not %q 30s after commit", q, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestMariaDBApplyDelay(t *testing.T) {
	m := testcluster.MariaDBFor(t)
	ctx := ctxT(t)
	if err := m.SetApplyDelay(ctx, -time.Millisecond); err == nil {
		t.Fatal("SetApplyDelay(-1ms): no error")
	}
	name := m.CreateDatabase(t)
	primary := open(t, "mysql", m.PrimaryDSN(name))
	replica := open(t, "mysql", m.ReplicaDSN(name))
	mustExec(t, primary, "CREATE TABLE kv (k int PRIMARY KEY, v varchar(10))")
	mustExec(t, primary, "INSERT INTO kv VALUES (1, 'old')")
	if err := m.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	const q = "SELECT v FROM kv WHERE k = 1"

	// A sub-second delay goes through the relay: the replica's master is
	// the relay's port, MariaDB's own delay stays 0.
	start := time.Now()
	if err := m.SetApplyDelay(ctx, 300*time.Millisecond); err != nil {
		if errors.Is(err, testcluster.ErrUnsupported) {
			t.Skipf("this provider keeps MASTER_DELAY (whole seconds): %v", err)
		}
		t.Fatal(err)
	}
	t.Logf("SetApplyDelay(300ms), through the relay: %v", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := m.SetApplyDelay(ctxT(t), 0); err != nil {
			t.Errorf("reset the delay: %v", err)
		}
	})
	relayPort := slaveStatus(t, replica, "Master_Port")
	// (The relay listens on 127.0.0.1 for local servers, on the Docker
	// network's gateway for containers.)
	if relayPort == strconv.Itoa(m.PrimaryPort()) {
		t.Fatalf("delayed replica's master is %s:%s, want the relay, not the primary's port %d",
			slaveStatus(t, replica, "Master_Host"), relayPort, m.PrimaryPort())
	}
	if got := slaveStatus(t, replica, "SQL_Delay"); got != "0" {
		t.Fatalf("SQL_Delay = %q, want 0 (the relay delays, not MASTER_DELAY)", got)
	}
	for _, c := range []struct {
		delay time.Duration
		value string
	}{{300 * time.Millisecond, "a"}, {100 * time.Millisecond, "b"}} {
		// 300ms was set above; 100ms changes the relay's delay in place.
		if err := m.SetApplyDelay(ctx, c.delay); err != nil {
			t.Fatal(err)
		}
		if got := slaveStatus(t, replica, "Master_Port"); got != relayPort {
			t.Fatalf("delay %v: Master_Port %s, want the relay's %s still", c.delay, got, relayPort)
		}
		// Two writes: the first after a switch has been seen to take about
		// 0.1 s longer, with or without the relay.
		for i, v := range []string{c.value + "1", c.value} {
			committed := time.Now()
			mustExec(t, primary, "UPDATE kv SET v = ? WHERE k = 1", v)
			if got := readValue(t, replica, q); got == v {
				t.Fatalf("delay %v: the write is on the replica %v after commit already", c.delay, time.Since(committed))
			}
			visible := visibleAfter(t, replica, q, v, committed)
			t.Logf("delay %v, write %d: visible on the replica %v after commit", c.delay, i+1, visible.Round(100*time.Microsecond))
		}
		if err := m.WaitCaughtUp(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// 0 points the replica at the primary again and closes the relay.
	start = time.Now()
	if err := m.SetApplyDelay(ctx, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("SetApplyDelay(0), direct again: %v", time.Since(start).Round(time.Millisecond))
	if got := slaveStatus(t, replica, "Master_Port"); got != strconv.Itoa(m.PrimaryPort()) {
		t.Fatalf("Master_Port after SetApplyDelay(0) = %s, want the primary's %d", got, m.PrimaryPort())
	}
	if got := slaveStatus(t, replica, "SQL_Delay"); got != "0" {
		t.Fatalf("SQL_Delay after reset = %q, want 0", got)
	}
	if c, err := net.Dial("tcp", "127.0.0.1:"+relayPort); err == nil {
		c.Close()
		t.Fatalf("the relay on port %s still accepts connections after SetApplyDelay(0)", relayPort)
	}
	for i, v := range []string{"direct1", "direct"} {
		committed := time.Now()
		mustExec(t, primary, "UPDATE kv SET v = ? WHERE k = 1", v)
		visible := visibleAfter(t, replica, q, v, committed)
		t.Logf("no delay, write %d: visible on the replica %v after commit", i+1, visible.Round(100*time.Microsecond))
	}
	if err := m.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if got := slaveStatus(t, replica, "Slave_SQL_Running"); got != "Yes" {
		t.Fatalf("Slave_SQL_Running = %q after the round trip through the relay", got)
	}
}
