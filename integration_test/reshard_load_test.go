package integration_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/harness/reshardload"
	"github.com/freshread/freshread/internal/harness/testcluster"
)

// reshardEnv runs the workload's processes as real processes: this test
// binary re-executed, which TestMain turns into a worker
// (reshardload.WorkerMain) before anything else.
func reshardEnv(t *testing.T) reshardload.Env {
	return reshardload.Env{
		PG:        testcluster.PostgresFor(t),
		RedisAddr: testcluster.RedisFor(t).Addr(),
		Spawn:     func() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") },
		Logf:      t.Logf,
	}
}

func checkReshardReport(t *testing.T, rep *reshardload.Report) {
	t.Helper()
	t.Logf("%s on %s: map version %d; creates %d updates %d deletes %d reads %d (lag reads %d, scatter reads %d, by ID %d); refused %d uncertain %d read errors %d",
		rep.Kind, rep.Engine, rep.MapVersion, rep.Creates, rep.Updates, rep.Deletes, rep.Reads, rep.LagReads, rep.ScatterReads, rep.IDReads, rep.Refused, rep.Uncertain, rep.ReadErrors)
	for _, m := range rep.Moves {
		t.Logf("move %s: copied %d rows in %s (%.0f rows/s), catch-up lag %s, hold %s (drain %s, apply %s of %d changes, verify %s, record %s, acks %s), cleaned %d",
			m.ID, m.RowsCopied, m.CopyTime.Round(time.Millisecond), m.CopyRowsPerSec, m.CatchUpLag.Round(time.Millisecond),
			m.Hold.Round(time.Millisecond), m.Drain.Round(time.Millisecond), m.Apply.Round(time.Millisecond), m.HoldChanges,
			m.Verify.Round(time.Millisecond), m.Record.Round(time.Millisecond), m.Acks.Round(time.Millisecond), m.CleanedRows)
	}
	t.Logf("write latency before the moves p50 %s p99 %s (%d writes); during p50 %s p99 %s (%d writes)",
		rep.WriteBefore[0], rep.WriteBefore[1], rep.WritesBefore, rep.WriteDuring[0], rep.WriteDuring[1], rep.WritesDuring)
	t.Logf("metrics: %v", rep.Metrics)
	for k, n := range rep.Errors {
		t.Logf("error x%d: %s", n, k)
	}
	for _, a := range rep.Anomalies {
		t.Errorf("anomaly: %s", a)
	}
	for _, p := range rep.Placement.Problems {
		t.Errorf("placement: %s", p)
	}
	if rep.Creates == 0 || rep.Reads == 0 || rep.WritesDuring == 0 {
		t.Errorf("the workload did not run through the moves: %d creates, %d reads, %d writes during the moves", rep.Creates, rep.Reads, rep.WritesDuring)
	}
	if rep.ScatterReads == 0 || rep.IDReads == 0 {
		t.Errorf("%d scatter reads and %d reads by ID ran", rep.ScatterReads, rep.IDReads)
	}
	if rep.Placement.Rows == 0 {
		t.Errorf("no rows found at the end")
	}
	for _, m := range rep.Moves {
		if m.Hold <= 0 {
			t.Errorf("move %s: no switch", m.ID)
		}
	}
}

// TestReshardDoublingUnderLoad: three worker processes (one following the
// map slowly) write and read through a 4 -> 8 doubling; every read is
// checked against the writer's log of acknowledged writes, and afterwards
// every row must be on the shard the map names, once, at its last
// acknowledged version.
func TestReshardDoublingUnderLoad(t *testing.T) { testDoublingUnderLoad(t, reshardEnv(t)) }

// TestMariaDBReshardDoublingUnderLoad is TestReshardDoublingUnderLoad
// with MariaDB shards and default database (the map stays in
// PostgreSQL): the moves follow the binlog, and the guard refuses with
// MariaDB's SIGNAL. testDoublingUnderLoad asserts.
func TestMariaDBReshardDoublingUnderLoad(t *testing.T) {
	env := reshardEnv(t)
	env.Maria = testcluster.MariaDBFor(t)
	testDoublingUnderLoad(t, env)
}

func testDoublingUnderLoad(t *testing.T, env reshardload.Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := reshardload.RunDoubling(ctx, env, reshardload.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkReshardReport(t, rep)
	if len(rep.Moves) != 4 {
		t.Errorf("%d moves, want 4", len(rep.Moves))
	}
	if rep.Metrics["freshread_sharding_bucket_moved_total"] == 0 {
		t.Errorf("no process met the guard: the slow process should have written a moving bucket with the old map during a hold")
	}
}

// TestReshardMigrationUnderLoad: the same workload on one unsharded
// database, migrated to four shards: stage one (reads with AllowLag on
// the shards while they follow), stage two (one switch), cleanup.
func TestReshardMigrationUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := reshardload.RunMigration(ctx, reshardEnv(t), reshardload.Options{}, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	checkReshardReport(t, rep)
	if rep.LagReads == 0 {
		t.Errorf("no read accepted a lag")
	}
}
