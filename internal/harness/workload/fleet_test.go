package workload

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

func TestMain(m *testing.M) {
	if IsFleetChild() { // a process of TestFleetSmoke's fleet
		os.Exit(FleetChildMain())
	}
	os.Exit(testcluster.Run(m, testcluster.Spec{}))
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_get:calls=21,usec=175,usec_per_call=8.33,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setinfo:calls=4,usec=3,usec_per_call=0.75,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=2,usec=90,usec_per_call=45.00,rejected_calls=0,failed_calls=0\r\n"
	got, err := parseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got["get"] != 21 || got["client|setinfo"] != 4 || got["info"] != 2 {
		t.Fatalf("parsed %v", got)
	}
	if _, err := parseCommandStats("cmdstat_get:usec=1\r\n"); err == nil {
		t.Fatal("a line without calls: no error")
	}
	if _, err := parseCommandStats("cmdstat_get:calls=x\r\n"); err == nil {
		t.Fatal("calls=x: no error")
	}
	// The earlier snapshot's INFO is not the fleet's.
	d, total := subCommandStats(map[string]int64{"get": 30, "info": 3, "mget": 5}, map[string]int64{"get": 21, "info": 2, "mget": 5})
	if total != 9 || d["get"] != 9 || len(d) != 1 {
		t.Fatalf("difference %v total %d, want get 9 only", d, total)
	}
}

func TestDSNWithAddr(t *testing.T) {
	for _, c := range []struct{ driver, dsn, server, addr, want string }{
		{"pgx", "postgres://postgres@127.0.0.1:5432/db1?sslmode=disable", "127.0.0.1:5432", "127.0.0.1:6000", "postgres://postgres@127.0.0.1:6000/db1?sslmode=disable"},
		{"mysql", "root:pw@tcp(127.0.0.1:3306)/db1?parseTime=true", "127.0.0.1:3306", "127.0.0.1:6001", "root:pw@tcp(127.0.0.1:6001)/db1?parseTime=true"},
	} {
		got, err := dsnWithAddr(c.driver, c.dsn, c.addr)
		if err != nil || got != c.want {
			t.Errorf("dsnWithAddr(%s, %s): %q, %v; want %q", c.driver, c.dsn, got, err, c.want)
		}
		addr, err := dsnAddr(c.driver, c.dsn)
		if err != nil || addr != c.server {
			t.Errorf("dsnAddr(%s, %s): %q, %v; want %q", c.driver, c.dsn, addr, err, c.server)
		}
	}
	if _, err := dsnWithAddr("oracle", "x", "y"); err == nil {
		t.Error("unknown driver: no error")
	}
}

func TestOpsInFlight(t *testing.T) {
	for rate, want := range map[float64]int{2: 2, 20: 2, 25: 3, 200: 8, 1000: 8} {
		if got := opsInFlight(rate); got != want {
			t.Errorf("opsInFlight(%g) = %d, want %d", rate, got, want)
		}
	}
}

// TestFleetSmoke runs a fleet of two processes on PostgreSQL for a few
// seconds: the harness works end to end (processes start, relays count,
// the active phase reads and writes through the plugin) and no read is
// older than a write another process had acknowledged.
func TestFleetSmoke(t *testing.T) {
	testcluster.PostgresFor(t)
	testcluster.RedisFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := RunFleet(ctx, FleetOptions{Engines: []string{Postgres}, Processes: []int{2},
		Warmup: 200 * time.Millisecond, Idle: time.Second, Active: 2 * time.Second, Rate: 40, Keys: 20,
		Binary: os.Args[0], Args: []string{"-test.run=^$"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Phase != PhaseIdle || res[1].Phase != PhaseActive {
		t.Fatalf("results %+v, want an idle and an active phase", res)
	}
	for _, r := range res {
		if r.Processes != 2 || len(r.Servers) != 3 {
			t.Fatalf("%s: %d processes, %d servers, want 2 and 3", r.Phase, r.Processes, len(r.Servers))
		}
	}
	a := res[1]
	if a.Reads+a.Writes < 40 || a.Writes == 0 || a.Errors != 0 || a.StaleReads != 0 {
		t.Fatalf("active phase: %d reads %d writes %d errors (%s) %d stale; want ≥ 40 operations, some writes, no errors, no stale reads",
			a.Reads, a.Writes, a.Errors, a.FirstError, a.StaleReads)
	}
	// Every write reaches the primary through its relay: the relay saw at
	// least one statement per write.
	if a.Servers[0].Queries < a.Writes {
		t.Fatalf("primary relay counted %d queries for %d writes", a.Servers[0].Queries, a.Writes)
	}
	if a.CPU <= 0 {
		t.Fatalf("fleet CPU %v over the active phase", a.CPU)
	}
}
