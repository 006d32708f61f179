package workload

import (
	"context"
	"os"
	"os/signal"
	"time"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// RunCommand is a bench command's run: run with a context that ends at
// an interrupt or after timeout, then the servers it started stopped
// (testcluster.Shutdown). It returns run's error and how long it took.
func RunCommand(timeout time.Duration, run func(context.Context) error) (time.Duration, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	err := run(ctx)
	cancel()
	stop()
	testcluster.Shutdown()
	return time.Since(start), err
}
