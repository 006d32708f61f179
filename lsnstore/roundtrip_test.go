package lsnstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

func TestRoundTripsTimeout(t *testing.T) {
	const floor, ceiling = 50 * time.Millisecond, 500 * time.Millisecond
	var e roundTrips
	if got := e.timeout(floor, ceiling); got != floor {
		t.Fatalf("no sample: %v, want the floor %v", got, floor)
	}
	// Each phase: n answers taking d, then the timeout within [min, max].
	for _, ph := range []struct {
		what     string
		n        int
		d        time.Duration
		min, max time.Duration
	}{
		{"fast store", 50, 200 * time.Microsecond, floor, floor},
		{"answers in 80ms (the timeout grows past them)", 20, 80 * time.Millisecond, 80*time.Millisecond + 1, ceiling},
		{"answers in 2s", 50, 2 * time.Second, ceiling, ceiling},
		{"fast again", 100, 200 * time.Microsecond, floor, floor},
	} {
		for range ph.n {
			e.observe(ph.d)
		}
		if got := e.timeout(floor, ceiling); got < ph.min || got > ph.max {
			t.Fatalf("%s: timeout %v, want within [%v, %v]", ph.what, got, ph.min, ph.max)
		}
	}
}

func TestRedisMaxTimeoutValidation(t *testing.T) {
	for _, c := range []struct {
		o     RedisOptions
		valid bool
	}{
		{RedisOptions{Database: "d", MaxTimeout: -1}, false},
		{RedisOptions{Database: "d", MaxTimeout: 10 * time.Millisecond}, false}, // below the default Timeout
		{RedisOptions{Database: "d", Timeout: time.Second, MaxTimeout: 100 * time.Millisecond}, false},
		{RedisOptions{Database: "d"}, true},
		{RedisOptions{Database: "d", Timeout: 10 * time.Millisecond, MaxTimeout: 10 * time.Millisecond}, true},
		{RedisOptions{Database: "d", Timeout: -1, MaxTimeout: time.Millisecond}, true},
	} {
		if err := c.o.Validate(); (err == nil) != c.valid {
			t.Errorf("%+v: error %v, want valid %v", c.o, err, c.valid)
		}
	}
}

// TestRedisSlowIsNotGone: a store whose answers take longer than Timeout
// because it (or the machine) is loaded keeps answering: the per-call
// timeout follows the measured round trips. A store that stops answering
// still fails the call.
func TestRedisSlowIsNotGone(t *testing.T) {
	r := testcluster.RedisFor(t)
	relay, err := testcluster.NewRelay(r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", relay.Port()), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	s := NewRedis(rdb, RedisOptions{Database: uniqueDB("slow")}) // Timeout 50ms, MaxTimeout 500ms
	raiseOK(t, s, []string{"t"}, 7)
	ctx := context.Background()
	// The load builds up: answers 10, 20, ... 80 ms late. (A call that
	// takes more than twice the average on a loaded machine may fail: it
	// is counted, not fatal.)
	// Each step also raises once, given MaxTimeout, as a serving
	// process's poll calls the store whatever its reads do: on a loaded
	// machine the lookups' round trips can jump past their timeout between
	// two steps, and only calls that answer teach the estimate.
	failed := 0
	for d := 10 * time.Millisecond; d <= 80*time.Millisecond; d += 10 * time.Millisecond {
		relay.SetDelay(d)
		raiseOK(t, s, []string{"t"}, 7)
		for range 5 {
			if _, err := s.WritePosition(ctx, []string{"t"}); err != nil {
				failed++
				t.Logf("answers %v late: %v (timeout %v)", d, err, s.rtt.timeout(s.timeout, s.maxTimeout))
			}
		}
	}
	answered := 0
	for i := range 20 {
		pos, err := s.WritePosition(ctx, []string{"t"})
		switch {
		case err == nil && !pos.Equal(PositionOf(7)):
			t.Fatalf("call %d: %v, want 0/7", i, pos)
		case err == nil:
			answered++
		default:
			t.Logf("call %d, answers 80ms late: %v (timeout %v)", i, err, s.rtt.timeout(s.timeout, s.maxTimeout))
		}
	}
	// With a fixed 50 ms timeout none would answer.
	if answered < 18 {
		t.Fatalf("%d of 20 calls answered 80ms late (%d failed while the delay grew), want at least 18", answered, failed)
	}
	// Gone: nothing answers; the call fails (by the timeout learned).
	relay.Stall(true)
	if _, err := s.WritePosition(ctx, []string{"t"}); err == nil {
		t.Fatal("a store that does not answer answered")
	}
	relay.Stall(false)
}
