package breaker

import (
	"testing"
	"time"
)

func TestBreakerOpensAfterFailuresAndProbesOnce(t *testing.T) {
	var b Breaker
	now := time.Unix(1000, 0)
	for i := 0; i < 2; i++ {
		b.Failure(now, 3)
		if !b.Allow(now) {
			t.Fatalf("open after %d failures, limit 3", i+1)
		}
	}
	b.Failure(now, 3)
	if b.Allow(now) {
		t.Fatal("still closed after 3 failures")
	}
	if b.Allow(now.Add(MinBackoff - time.Millisecond)) {
		t.Fatal("probe allowed before the backoff")
	}
	later := now.Add(MinBackoff)
	if !b.Allow(later) {
		t.Fatal("no probe after the backoff")
	}
	if b.Allow(later) {
		t.Fatal("a second caller may probe at the same time")
	}
	b.Failure(later, 3) // the probe failed: backoff doubles
	if b.Allow(later.Add(MinBackoff)) {
		t.Fatal("backoff did not double")
	}
	if !b.Allow(later.Add(2 * MinBackoff)) {
		t.Fatal("no probe after the doubled backoff")
	}
	b.Success()
	if !b.Allow(later) || !b.Allow(later) {
		t.Fatal("not closed after a successful probe")
	}
}
