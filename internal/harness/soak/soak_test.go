package soak

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/harness/linearize"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/plugin"
)

func TestMain(m *testing.M) {
	os.Exit(testcluster.Run(m, testcluster.Spec{}))
}

// duration is FRESHREAD_SOAK_DURATION (per engine), 40 s by default: the
// short run of make test, long enough to inject every fault once (3 s
// apart); make soak sets minutes.
func duration(t *testing.T) time.Duration {
	s := os.Getenv("FRESHREAD_SOAK_DURATION")
	if s == "" {
		return 40 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("FRESHREAD_SOAK_DURATION: %v", err)
	}
	return d
}

// soakConfig is the main soaks' configuration: FRESHREAD_SOAK_DURATION,
// and FRESHREAD_SOAK_FAULTS (comma-separated fault names; all when empty).
func soakConfig(t *testing.T) Config {
	c := Config{Duration: duration(t)}
	if f := os.Getenv("FRESHREAD_SOAK_FAULTS"); f != "" {
		c.Only = strings.Split(f, ",")
	}
	return c
}

func checkReport(t *testing.T, rep Report) {
	t.Helper()
	t.Log("\n" + rep.String())
	if len(rep.Stale) > 0 {
		t.Errorf("%d STALE READS", len(rep.Stale))
	}
	if rep.Errors > 0 {
		t.Errorf("%d errors returned to callers while the primary was up", rep.Errors)
	}
	if len(rep.DirectStale) > 0 {
		t.Errorf("%d reads missed a direct write more than %v after it returned", len(rep.DirectStale), directBound)
	}
	if rep.Linear.Result != linearize.Ok {
		t.Errorf("linearizability: the history is %v (not linearizable per read and row, or not decided)", rep.Linear.Result)
	}
	if len(rep.RefusedCommitted) > 0 {
		t.Errorf("%d writes refused with ErrStoreUnreachable were committed", len(rep.RefusedCommitted))
	}
	if rep.Reads == 0 || rep.Writes == 0 {
		t.Errorf("no work done: %d reads, %d writes", rep.Reads, rep.Writes)
	}
}

// TestSoakPostgres runs with a tracker process (killed and restarted by
// a fault) and writes made outside the plugins.
func TestSoakPostgres(t *testing.T) {
	c := NewPostgres(t, testcluster.PostgresFor(t))
	cfg := soakConfig(t)
	cfg.Tracker = true
	checkReport(t, Run(t, c, Store{Redis: testcluster.RedisWithArgsFor(t, RedisArgs...)}, cfg))
}

func TestSoakMariaDB(t *testing.T) {
	c := NewMariaDB(t, testcluster.MariaDBFor(t))
	checkReport(t, Run(t, c, Store{Redis: testcluster.RedisWithArgsFor(t, RedisArgs...)}, soakConfig(t)))
}

// sentinelConfig is soakConfig for a soak on a Sentinel setup: a short run
// (under a minute) injects only the store's faults, so that it fails over
// several times.
func sentinelConfig(t *testing.T) Config {
	c := soakConfig(t)
	if c.Only == nil && c.Duration < time.Minute {
		c.Only = []string{"sentinel-failover", "sentinel-flushall"}
	}
	return c
}

func TestSoakPostgresSentinel(t *testing.T) {
	c := NewPostgres(t, testcluster.PostgresFor(t))
	checkReport(t, Run(t, c, Store{Sentinel: testcluster.RedisSentinelFor(t)}, sentinelConfig(t)))
}

func TestSoakMariaDBSentinel(t *testing.T) {
	c := NewMariaDB(t, testcluster.MariaDBFor(t))
	checkReport(t, Run(t, c, Store{Sentinel: testcluster.RedisSentinelFor(t)}, sentinelConfig(t)))
}

// TestSoakCatchesStaleReads: the harness and its checkers (its own and
// the linearizability check) do see stale reads when there are some: with Eventual
// consistency (any replica, fresh or not, as dbresolver does) and replay
// paused, they report them.
func TestSoakCatchesStaleReads(t *testing.T) {
	c := NewPostgres(t, testcluster.PostgresFor(t))
	rep := Run(t, c, Store{Redis: testcluster.RedisFor(t)}, Config{Duration: 8 * time.Second, Only: []string{"replay-paused"},
		FaultEvery: 4 * time.Second, FaultFor: 2 * time.Second,
		Plugin: func(pc *plugin.Config) { pc.Consistency = plugin.Eventual }})
	t.Log("\n" + rep.String())
	if len(rep.Stale) == 0 {
		t.Fatal("no stale read reported with Eventual consistency and replay paused: the soak cannot see them")
	}
	if rep.Linear.Result != linearize.Illegal {
		t.Fatalf("the linearizability check found the history %v with Eventual consistency and replay paused: it cannot see stale reads", rep.Linear.Result)
	}
}

// TestSoakChild is a soak process's body (RunChild); a no-op otherwise.
func TestSoakChild(t *testing.T) {
	if os.Getenv(EnvChild) == "" {
		t.Skip("not a soak process")
	}
	RunChild(t)
}

// TestSoakTrackerChild is a soak tracker process's body (RunTrackerChild);
// a no-op otherwise.
func TestSoakTrackerChild(t *testing.T) {
	if os.Getenv(EnvTracker) == "" {
		t.Skip("not a soak tracker process")
	}
	RunTrackerChild(t)
}

// TestSoakOSProcesses: the soak with each plugin instance in a process of
// its own, sharing only the servers, on PostgreSQL.
func TestSoakOSProcesses(t *testing.T) {
	c := NewPostgres(t, testcluster.PostgresFor(t))
	checkReport(t, Run(t, c, Store{Redis: testcluster.RedisWithArgsFor(t, RedisArgs...)}, halfOSProcesses(soakConfig(t))))
}

func halfOSProcesses(c Config) Config {
	c.Duration /= 2
	c.OSProcesses = true
	return c
}
