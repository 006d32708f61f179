package testcluster

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// An engine asked for (FRESHREAD_DOCKER=1) that is slow to answer is waited
// for: a ping that times out is retried until patience runs out. A CI run
// failed every Redis test of two packages when one two-second ping met an
// engine busy starting other packages' containers.
func TestRetryPingWaitsForABusyEngine(t *testing.T) {
	start := time.Now()
	calls := 0
	busy := func(timeout time.Duration) error {
		calls++
		if time.Since(start) < 3*time.Second {
			time.Sleep(min(timeout, time.Second))
			return errors.New("docker ping: context deadline exceeded")
		}
		return nil
	}
	if err := retryPing(30*time.Second, busy); err != nil {
		t.Fatalf("an engine that answers after 3 s, with 30 s of patience: %v", err)
	}
	if calls < 2 {
		t.Fatalf("the engine was pinged %d times; a failed ping must be retried", calls)
	}
}

// An engine that never answers is reported with the last reason, once the
// patience given has passed.
func TestRetryPingGivesUp(t *testing.T) {
	start := time.Now()
	never := func(time.Duration) error { return errors.New("docker ping: connection refused") }
	err := retryPing(2*time.Second, never)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("an engine that never answers: err = %v, want the ping's reason", err)
	}
	if took := time.Since(start); took < time.Second || took > 30*time.Second {
		t.Fatalf("retryPing(2s) gave up after %s", took)
	}
}
