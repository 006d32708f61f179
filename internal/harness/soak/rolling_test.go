package soak

import (
	"testing"

	"github.com/freshread/freshread/internal/harness/linearize"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// TestRollingUpgrade: processes of the last release (RELEASES, built from
// git history) and of this tree share one Redis store under the soak's
// workload while replay is paused and resumed: side by side, then the old
// ones replaced one by one by new ones, then every new one by an old one
// (a rollback). No read is stale, in any phase, and every phase did work,
// much of it reading rows the other release wrote.
func TestRollingUpgrade(t *testing.T) {
	checkRollingUpgrade(t, NewPostgres(t, testcluster.PostgresFor(t)))
}

// TestMariaDBRollingUpgrade is TestRollingUpgrade on MariaDB (replication
// paused by stopping the replica's SQL thread).
func TestMariaDBRollingUpgrade(t *testing.T) {
	checkRollingUpgrade(t, NewMariaDB(t, testcluster.MariaDBFor(t)))
}

// checkRollingUpgrade runs the last release beside this tree on c and
// checks the report: no stale read, a linearizable history, no error, and
// work in every phase.
func checkRollingUpgrade(t *testing.T, c Cluster) {
	st := Store{Redis: testcluster.RedisFor(t)}
	rel, old := BuildRelease(t)
	rep := RunRolling(t, c, st, RollingConfig{Old: old})
	t.Logf("%s beside this tree:\n%s", rel.Version, rep)
	if len(rep.Stale) > 0 {
		t.Errorf("%d STALE READS", len(rep.Stale))
	}
	if rep.Linear.Result != linearize.Ok {
		t.Errorf("linearizability: the history is %v", rep.Linear.Result)
	}
	if rep.Errors > 0 || rep.Unknown > 0 || rep.Refused > 0 {
		t.Errorf("%d errors, %d writes of unknown outcome, %d refused: want none without faults of the store", rep.Errors, rep.Unknown, rep.Refused)
	}
	if rep.Pauses < 3 {
		t.Errorf("replay paused %d times, want >= 3", rep.Pauses)
	}
	for _, p := range rep.Phases {
		if p.Writes < 50 || p.Reads < 200 || p.CrossReplica < 20 {
			t.Errorf("phase %s did too little: %d writes (want >= 50), %d reads (>= 200), %d of the other release's rows by a replica (>= 20)",
				p.Name, p.Writes, p.Reads, p.CrossReplica)
		}
	}
}
