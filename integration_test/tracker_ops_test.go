package integration_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/tracker"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitStatus polls url until it answers code.
func waitStatus(t *testing.T, url string, code int, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, body := httpGet(t, url)
		if got == code {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d %q after %v; want %d", url, got, body, within, code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTrackerRedisOutageAndPrimaryRestart: /readyz says 503 while Redis is
// down and 200 again once it is back, without restarting the tracker; after
// a primary restart the tracker decodes again by itself, and a direct
// write is then read fresh.
func TestTrackerRedisOutageAndPrimaryRestart(t *testing.T) {
	name := "outage-" + t.Name()
	store, srv := newRedisStore(t, name)
	e := newEnv(t, withStore(store))
	run := startTracker(e, name, tracker.ModeLogical)
	t.Cleanup(func() { dropSlot(e, run) })
	h := httptest.NewServer(run.tr.Handler())
	t.Cleanup(h.Close)
	waitReady(t, run.tr, 20*time.Second)
	waitStatus(t, h.URL+"/readyz", 200, 5*time.Second)
	if code, _ := httpGet(t, h.URL+"/healthz"); code != 200 {
		t.Fatalf("/healthz = %d", code)
	}

	ctx := context.Background()
	if err := srv.Stop(ctx); err != nil {
		if err == testcluster.ErrUnsupported {
			t.Skip("Redis given by the environment cannot be stopped")
		}
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = srv.Start(context.Background())
		}
	})
	body := waitStatus(t, h.URL+"/readyz", 503, 10*time.Second)
	if !strings.Contains(body, "redis") {
		t.Fatalf("/readyz during the Redis outage: %q; want Redis named", body)
	}
	// A direct write while Redis is down: published once it is back.
	raw := e.rawConn()
	// The row is created through the plugin, whose publication fails
	// while Redis is down (it then reads from the primary itself).
	if err := e.db.Create(&Item{ID: 1, Name: "old"}).Error; err != nil {
		t.Fatal(err)
	}
	pos := rawWrite(t, raw, "UPDATE items SET name = 'during-outage' WHERE id = 1")
	time.Sleep(500 * time.Millisecond)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	waitStatus(t, h.URL+"/readyz", 200, 30*time.Second)
	waitRaised(t, store, []string{"items"}, pos, 30*time.Second)

	// Primary restart: the tracker reconnects (pools and the stream).
	if err := e.pg.RestartPrimary(ctx); err != nil {
		if err == testcluster.ErrUnsupported {
			t.Skip("primary given by the environment cannot be restarted")
		}
		t.Fatal(err)
	}
	waitStatus(t, h.URL+"/readyz", 200, 60*time.Second)
	waitReady(t, run.tr, 30*time.Second)
	e.waitCaughtUp()
	time.Sleep(200 * time.Millisecond)
	e.pauseAll()
	raw2 := e.rawConn()
	pos = rawWrite(t, raw2, "UPDATE items SET name = 'after-restart' WHERE id = 1")
	waitRaised(t, store, []string{"items"}, pos, 30*time.Second)
	got := e.readItem(e.db, 1)
	e.mustPrimary(got, "read after a direct write following a primary restart")
	if got.Name != "after-restart" {
		t.Fatalf("read: %+v; want after-restart", got)
	}
	metrics := waitStatus(t, h.URL+"/metrics", 200, time.Second)
	for _, m := range []string{"freshread_tracker_replay_lag_bytes", "freshread_tracker_decoded_transactions_total", "freshread_tracker_dependency_edges", "freshread_tracker_registry_size"} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}
