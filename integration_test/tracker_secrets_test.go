package integration_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/registry"
	"github.com/freshread/freshread/tracker"
)

// dumpRedis returns every key and value under prefix.
func dumpRedis(t *testing.T, rdb *redis.Client, pattern string) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		fmt.Fprintf(&b, "%s = ", k)
		switch rdb.Type(ctx, k).Val() {
		case "string":
			b.WriteString(rdb.Get(ctx, k).Val())
		case "hash":
			fmt.Fprint(&b, rdb.HGetAll(ctx, k).Val())
		case "set":
			fmt.Fprint(&b, rdb.SMembers(ctx, k).Val())
		default:
			b.WriteString("(" + rdb.Type(ctx, k).Val() + ")")
		}
		b.WriteByte('\n')
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestTrackerNoPasswordAnywhere: a database announced in the registry is
// tracked with the tracker's own credentials; neither Redis, the logs,
// /metrics nor /readyz ever hold the password, even when connections fail.
func TestTrackerNoPasswordAnywhere(t *testing.T) {
	prefix := fmt.Sprintf("sec%d:", time.Now().UnixNano())
	e := newEnv(t)
	e.exec(trackerDepsSchema)
	run := startTracker(e, "sec-"+t.Name(), tracker.ModeLogical, func(c *tracker.Config) {
		c.Databases = nil
		c.NoRegistry = false
		c.Prefix = prefix
		c.RegistryInterval = 100 * time.Millisecond
	})
	t.Cleanup(func() { dropSlot(e, run) })
	ctx := context.Background()

	// The registry refuses anything that looks like a credential.
	bad := run.entry
	bad.Host = "postgres:" + trackerPassword + "@127.0.0.1"
	if err := registry.Announce(ctx, run.rdb, prefix, bad); err == nil {
		t.Fatal("Announce accepted a host holding a password")
	} else if strings.Contains(err.Error(), trackerPassword) {
		t.Fatalf("Announce's error holds the password: %v", err)
	}
	// The real entry, plus a replica that cannot be reached (errors get
	// logged and reported by /readyz).
	ent := run.entry
	ent.Replicas = append(ent.Replicas, registry.ReplicaEntry{Name: "gone", Host: "127.0.0.1", Port: 1})
	if err := registry.Announce(ctx, run.rdb, prefix, ent); err != nil {
		t.Fatal(err)
	}
	waitGraph(t, newStoreWithPrefix(t, run.rdb, ent.Store, prefix), "ta", "tdyn")
	waitReady(t, run.tr, 20*time.Second)
	raw := e.rawConn()
	pos := rawWrite(t, raw, "INSERT INTO ta VALUES (99, 'x')")
	waitRaised(t, newStoreWithPrefix(t, run.rdb, ent.Store, prefix), []string{"ta", "tb"}, pos, 20*time.Second)

	// The tracker's replay positions live ReplayTTL (2 s here): wait for
	// them in the store while it runs, so that the dump below is checked
	// with them.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if d := dumpRedis(t, run.rdb, prefix+"*"); strings.Contains(d, e.dbName) && strings.Contains(d, "replay_lsn") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tracker published no replay position within 20 s:\n%s", dumpRedis(t, run.rdb, prefix+"*"))
		}
	}
	h := httptest.NewServer(run.tr.Handler())
	defer h.Close()
	_, metrics := httpGet(t, h.URL+"/metrics")
	_, ready := httpGet(t, h.URL+"/readyz")
	dump := dumpRedis(t, run.rdb, prefix+"*")
	run.stop()
	if !strings.Contains(dump, e.dbName) || !strings.Contains(dump, "replay_lsn") {
		t.Fatalf("Redis dump lacks the tracker's keys:\n%s", dump)
	}
	dump += dumpRedis(t, run.rdb, prefix+"*")
	logs := run.logs.String()
	if !strings.Contains(logs, "tracking database") {
		t.Fatalf("no tracker logs captured:\n%s", logs)
	}
	for what, text := range map[string]string{"Redis": dump, "the logs": logs, "/metrics": metrics, "/readyz": ready} {
		if strings.Contains(text, trackerPassword) {
			t.Errorf("the password appears in %s", what)
		}
	}
	t.Logf("registry member: %s", run.rdb.SMembers(ctx, prefix+registry.Key).Val())
}
