// Package integration_test runs freshread against real servers started by
// internal/harness/testcluster: a PostgreSQL primary with two streaming replicas
// and Redis. Every routing rule is checked on data: write, pause replay,
// read, and compare what came back (and which server sent it).
package integration_test

import (
	"os"
	"testing"

	"github.com/freshread/freshread/internal/harness/reshardload"
	"github.com/freshread/freshread/internal/harness/testcluster"
)

func TestMain(m *testing.M) {
	reshardload.WorkerMain() // a worker process of the resharding tests: runs and exits
	os.Exit(testcluster.Run(m, testcluster.Spec{PostgresReplicas: 2}))
}
