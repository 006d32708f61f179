package roundtrip

import (
	"testing"
	"time"
)

func TestEstimatorFollowsAnswers(t *testing.T) {
	const floor, ceiling = 10 * time.Millisecond, time.Second
	var e Estimator
	if got := e.Timeout(floor, ceiling); got != floor {
		t.Fatalf("no sample: timeout %v, want the floor %v", got, floor)
	}
	for range 50 {
		e.Observe(20 * time.Millisecond)
	}
	if got := e.Timeout(floor, ceiling); got < 40*time.Millisecond || got > 60*time.Millisecond {
		t.Fatalf("steady 20ms answers: timeout %v, want about 40ms", got)
	}
	for range 50 {
		e.Observe(600 * time.Millisecond)
	}
	if got := e.Timeout(floor, ceiling); got != ceiling {
		t.Fatalf("600ms answers: timeout %v, want the ceiling %v", got, ceiling)
	}
}
