package plugin

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestFallbackLimiter(t *testing.T) {
	if newFallbackLimiter(0, 5) != nil {
		t.Fatal("rate 0 limits")
	}
	l := newFallbackLimiter(10, 3) // one per 100 ms, three at once
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		if !l.allow(t0) {
			t.Fatalf("read %d of the burst refused", i)
		}
	}
	if l.allow(t0) {
		t.Fatal("a fourth read at once allowed")
	}
	if l.allow(t0.Add(50 * time.Millisecond)) {
		t.Fatal("allowed before the rate's interval")
	}
	if !l.allow(t0.Add(100 * time.Millisecond)) {
		t.Fatal("refused after the rate's interval")
	}
	// Idle for long: the burst again, not more.
	t1 := t0.Add(time.Hour)
	n := 0
	for l.allow(t1) {
		n++
	}
	if n != 3 {
		t.Fatalf("after an idle hour %d reads allowed at once, want the burst 3", n)
	}
}

// Concurrent callers get exactly the burst.
func TestFallbackLimiterConcurrent(t *testing.T) {
	l := newFallbackLimiter(1, 50)
	now := time.Unix(2000, 0)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if l.allow(now) {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := allowed.Load(); n != 50 {
		t.Fatalf("%d reads allowed at one instant by 8 goroutines, want the burst 50", n)
	}
}
