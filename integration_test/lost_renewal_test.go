package integration_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/freshread/freshread/plugin"
)

// TestLostRenewalEndsOnlyInFlightWrites: a Redis failover to a replica
// that missed the last lease renewals leaves every process's lease ending
// earlier in the store than the process itself counts on, and the anchor,
// which expires with the earliest lease, expiring early too. Emulated here
// by moving every lease's end into the past and expiring the anchor, while
// process A holds a
// transaction open that updated item 1 (its connection holds A's writer
// tag on PostgreSQL). The first process to verify the store removes the
// leases as lapsed, and one ends the connections tagged with them. On
// PostgreSQL A's transaction does not commit (its connection is ended);
// on both engines A is never told that a write committed that did not,
// B never reads item 1 stale, and A's next write, under a new lease,
// commits and is read fresh with every replica paused. This is what
// the soak's sentinel-failover fault allows, and why.
func TestLostRenewalEndsOnlyInFlightWrites(t *testing.T) {
	for _, engine := range []string{"postgres", "mariadb"} {
		t.Run(engine, func(t *testing.T) { lostRenewal(t, engine) })
	}
}

func lostRenewal(t *testing.T, engine string) {
	database := "lost-renewal-" + t.Name()
	store, r := newRedisStore(t, database)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rdb.Close()
	leased := withConfig(func(c *plugin.Config) { c.WriterLease = 3 * time.Second })
	e := newEngineEnv(t, engine, withStore(store), leased)
	a, _ := e.open(withStore(store), leased)
	b, _ := e.open(withStore(store), leased)
	// ended sums the fence's metric over every process: whichever
	// verifies first removes the leases and ends the connections.
	ended := func() float64 {
		e.mu.Lock()
		plugs := slices.Clone(e.plugs)
		e.mu.Unlock()
		n := 0.0
		for _, p := range plugs {
			n += pluginMetric(t, p, "freshread_lapsed_writer_connections_ended_total")
		}
		return n
	}
	seedItem(t, e, b, 1)
	seedItem(t, e, b, 2)
	ctx := context.Background()
	leases := "freshread:{" + database + "}-leases"
	anchor := "freshread:{" + database + "}-anchor"
	errNoFence := errors.New("no process ended a connection of the leases whose end the store lost")

	// A wrote before: on MariaDB its connection keeps the tag (ended
	// below although idle); on PostgreSQL its transaction holds one.
	if err := a.Exec("UPDATE items SET version = version + 1 WHERE id = 2").Error; err != nil {
		t.Fatal(err)
	}
	err := a.Transaction(func(tx *gorm.DB) error {
		if err := tx.Model(&Item{ID: 1}).Update("name", "in-flight").Error; err != nil {
			return err
		}
		before := ended()
		members, err := rdb.ZRange(ctx, leases, 0, -1).Result()
		if err != nil {
			return err
		}
		if len(members) == 0 {
			return errors.New("no lease in the store: the test exercises nothing")
		}
		past := time.Now().Add(-time.Minute).UnixMilli()
		pipe := rdb.TxPipeline()
		for _, m := range members {
			pipe.ZAddXX(ctx, leases, redis.Z{Score: float64(past), Member: m})
		}
		pipe.PExpire(ctx, anchor, time.Millisecond)
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		deadline := time.Now().Add(10 * time.Second)
		for ended() == before {
			if time.Now().After(deadline) {
				return errNoFence
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	})
	t.Logf("A's transaction across the lost renewals: %v", err)
	if errors.Is(err, errNoFence) {
		t.Fatal(err)
	}
	got := readPrimaryName(t, e, 1)
	if err == nil && got != "in-flight" {
		t.Fatalf("A's transaction was acknowledged, but the primary holds %q: a write lost", got)
	}
	if engine == "postgres" && got != "old" {
		// On PostgreSQL the transaction held its tag from its BEGIN, so
		// its connection was ended before the COMMIT. (On MariaDB a
		// transaction takes its tag before its COMMIT: begun on a
		// connection that held none, it commits under the new lease.)
		t.Fatalf("A's transaction (%v) committed although its connection held the tag of a lapsed lease: the primary holds %q", err, got)
	}
	// Whatever A was told, B reads what the primary holds.
	e.pauseAll()
	if r := e.readItem(b, 1); r.Name != got {
		t.Fatalf("B read %q while the primary holds %q (A: %v): STALE READ", r.Name, got, err)
	}
	e.resumeAll()
	// A goes on under a new lease: its next write commits (retried while
	// its lease is being renewed, as a caller retries ErrStoreUnreachable).
	var werr error
	deadline := time.Now().Add(15 * time.Second)
	for {
		werr = a.Model(&Item{ID: 2}).Update("name", "after").Error
		if werr == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if werr != nil {
		t.Fatalf("A's write after the lost renewals still fails after 15 s: %v", werr)
	}
	e.pauseAll()
	if r := e.readItem(b, 2); r.Name != "after" {
		t.Fatalf("B read item 2 %q after A's write under its new lease, want \"after\": STALE READ", r.Name)
	}
	if r := e.readItem(b, 1); r.Name != "old" {
		t.Fatalf("B read item 1 %q, want \"old\"", r.Name)
	}
}
