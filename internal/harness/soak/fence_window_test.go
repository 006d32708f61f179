package soak

import (
	"testing"
	"time"
)

// TestInFenceWindow: errors of connections the writer fence ended are
// allowed during a cut from Redis and a fault that loses lease renewals,
// and for a while after each, never around other faults.
func TestInFenceWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ws := []faultWindow{
		{name: "redis-partition-one", start: t0, end: t0.Add(time.Second)},
		{name: "sentinel-failover", start: t0.Add(time.Minute), end: t0.Add(time.Minute + time.Second), losesLeases: true},
		{name: "replay-paused", start: t0.Add(2 * time.Minute), end: t0.Add(2*time.Minute + time.Second)},
	}
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{
		{-time.Millisecond, false},
		{0, true},
		{3*time.Second + 999*time.Millisecond, true},
		{4 * time.Second, false},
		{time.Minute + time.Second + soakLease + 3*time.Second - time.Millisecond, true},
		{time.Minute + time.Second + soakLease + 3*time.Second, false},
		{2*time.Minute + 500*time.Millisecond, false},
	} {
		if got := inFenceWindow(ws, t0.Add(c.at)); got != c.want {
			t.Errorf("at +%v: in a fence window %v, want %v", c.at, got, c.want)
		}
	}
}
