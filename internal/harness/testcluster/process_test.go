package testcluster

import (
	"os/exec"
	"testing"
	"time"
)

// TestServerCrashed: a server that ends by itself crashed; one stopped
// through stop did not, nor one never started.
func TestServerCrashed(t *testing.T) {
	var never server
	if never.crashed() {
		t.Error("a server never started crashed")
	}
	var gone server
	if err := gone.start(exec.Command("sh", "-c", "exit 3")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !gone.crashed() {
		if time.Now().After(deadline) {
			t.Fatal("a server that exited by itself is not reported crashed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var stopped server
	if err := stopped.start(exec.Command("sleep", "30")); err != nil {
		t.Fatal(err)
	}
	stopped.stop(5 * time.Second)
	if stopped.crashed() {
		t.Error("a server stopped through stop is reported crashed")
	}
}
