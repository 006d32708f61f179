package integration_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lookup"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/sharding"
	"github.com/freshread/freshread/tracker"
)

// The Redis commands of each feature. The plugin's and the tracker's are
// read from the ACL SETUSER lines of docs/guide/operations.md ("Redis
// permissions"), so the test runs exactly what the guide tells users to
// grant; the lookup cache's and the ID generator's follow its table.
const (
	aclClient = "+client|setinfo"
	aclLookup = "+mget +get +set +del"
	aclIDGen  = "+set +get +pexpire +del +info +eval +evalsha"
)

// guideACL returns the commands the guide's ACL SETUSER line for user
// grants (without CLIENT SETINFO, which aclServer.user adds where the
// server knows it).
func guideACL(t *testing.T, user string) string {
	t.Helper()
	text, err := os.ReadFile("../docs/guide/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "ACL" || f[1] != "SETUSER" || f[2] != user {
			continue
		}
		var cmds []string
		for _, c := range f[3:] {
			if strings.HasPrefix(c, "+") && c != aclClient {
				cmds = append(cmds, c)
			}
		}
		return strings.Join(cmds, " ")
	}
	t.Fatalf("docs/guide/operations.md has no ACL SETUSER line for %q", user)
	return ""
}

// aclServer makes Redis users allowed a list of commands on one key
// pattern, on the package's Redis server.
type aclServer struct {
	t     *testing.T
	addr  string
	admin *redis.Client
}

func newACLServer(t *testing.T) *aclServer {
	r := testcluster.RedisFor(t)
	admin := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { admin.Close() })
	return &aclServer{t: t, addr: r.Addr(), admin: admin}
}

// user creates user, allowed cmds (and CLIENT SETINFO where the server
// knows it) on the keys starting with prefix, and returns a client of it.
func (s *aclServer) user(user, prefix, cmds string) *redis.Client {
	s.t.Helper()
	ctx := context.Background()
	setUser := func(cmds string) error {
		args := []any{"ACL", "SETUSER", user, "reset", "on", ">pw", "~" + prefix + "*", "resetchannels"}
		for _, c := range strings.Fields(cmds) {
			args = append(args, c)
		}
		return s.admin.Do(ctx, args...).Err()
	}
	// CLIENT SETINFO exists from Redis 7.2 on (go-redis sends it on every
	// new connection; an older server refuses it as unknown, not denied).
	if err := setUser(aclClient + " " + cmds); err != nil {
		if !strings.Contains(err.Error(), "Unknown command") {
			s.t.Fatal(err)
		}
		if err := setUser(cmds); err != nil {
			s.t.Fatal(err)
		}
	}
	s.t.Cleanup(func() { s.admin.Do(context.Background(), "ACL", "DELUSER", user) })
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, Username: user, Password: "pw", ContextTimeoutEnabled: true})
	s.t.Cleanup(func() { rdb.Close() })
	return rdb
}

// denied returns the server's ACL LOG entries of users.
func (s *aclServer) denied(users ...string) []string {
	s.t.Helper()
	log, err := s.admin.Do(context.Background(), "ACL", "LOG").Slice()
	if err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for _, entry := range log {
		var name any
		switch e := entry.(type) {
		case map[any]any: // RESP3
			name = e["username"]
		case map[string]any:
			name = e["username"]
		case []any: // RESP2: field, value, ...
			for i := 0; i+1 < len(e); i += 2 {
				if fmt.Sprint(e[i]) == "username" {
					name = e[i+1]
				}
			}
		default:
			s.t.Fatalf("ACL LOG entry of an unknown shape: %#v", entry)
		}
		for _, u := range users {
			if fmt.Sprint(name) == u {
				out = append(out, fmt.Sprint(entry))
			}
		}
	}
	return out
}

// TestRedisACL runs every feature that uses Redis as a Redis user allowed
// exactly the documented commands on the documented key pattern, and
// checks that Redis denied nothing (ACL LOG): the plugin (a write, a fresh
// read on a replica, replay positions published by the plugin and, in a
// second plugin, read from the store, the announcement, the dependency
// graph and direct writes read from the tracker), an in-process tracker in
// logical mode (as its own user: registry, replay positions, the graph,
// a direct write decoded and raised), the lookup cache's read-through and
// the ID generator's lease (each as a user of its own row of the table).
// The sharding bucket map is kept in PostgreSQL, not Redis.
func TestRedisACL(t *testing.T) {
	s := newACLServer(t)
	ctx := context.Background()
	user := fmt.Sprintf("acl%d", time.Now().UnixNano())
	trackerUser := user + "-tracker"
	prefix := user + ":"
	rdb := s.user(user, prefix, guideACL(t, "freshread"))
	trackerRdb := s.user(trackerUser, prefix, guideACL(t, "freshread-tracker"))
	// The lookup cache and the ID generator each with a user of its own
	// row of the table, on a client no store is built on (watched as the
	// guide says).
	lookupRdb := s.user(user+"-lookup", prefix, aclLookup)
	idgenRdb := s.user(user+"-idgen", prefix, aclIDGen)
	lsnstore.WatchRedis(lookupRdb)
	lsnstore.WatchRedis(idgenRdb)
	deniedBefore := lsnstore.DeniedCommands()

	// The plugin publishing replay positions itself: a write, then a read
	// fresh on a replica once it replayed it.
	storeName := "acl-" + user
	store := lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: storeName, Prefix: prefix})
	e := newEnv(t, withStore(store), withConfig(func(c *plugin.Config) { c.Announce, c.IdleAfter = true, 300*time.Millisecond }))
	if err := e.db.Create(&Item{ID: 1, Name: "acl"}).Error; err != nil {
		t.Fatal(err)
	}
	if got := e.eventuallyReplica(func() served { return e.readItem(e.db, 1) }, "item written as the restricted user"); got.Name != "acl" {
		t.Fatalf("fresh read: %+v", got)
	}
	waitReplayPositions(t, store, e.c.replicas())

	// The tracker as its own user, finding the database in the registry
	// the plugin announced it in.
	run := startTracker(e, storeName, tracker.ModeLogical, func(c *tracker.Config) {
		c.Redis = trackerRdb
		c.Prefix = prefix
		c.Databases = nil
		c.NoRegistry = false
		c.RegistryInterval = 100 * time.Millisecond
	})
	t.Cleanup(func() { dropSlot(e, run) })
	waitReady(t, run.tr, 30*time.Second)
	waitPublished(t, store)
	// A second plugin taking replay positions and direct writes from the
	// tracker.
	fromTracker, _ := e.open(withStore(store), withConfig(func(c *plugin.Config) {
		c.ReplayFromStore, c.DirectWrites = true, true
	}))
	raw := e.rawConn()
	pos := rawWrite(t, raw, "UPDATE items SET name = 'direct', version = 2 WHERE id = 1")
	waitRaised(t, store, []string{"items"}, pos, 30*time.Second)
	if got := e.eventuallyReplica(func() served { return e.readItem(fromTracker, 1) }, "direct write read with the tracker's positions"); got.Name != "direct" {
		t.Fatalf("read of the direct write: %+v", got)
	}
	for _, d := range e.decisions {
		if d.Reason == plugin.ReasonStoreError {
			t.Fatalf("a read found the store failing: %+v", d)
		}
	}

	// The lookup cache: a Put, then a Resolve from the cache after the
	// table's answer was cached (read-through), and a Delete.
	lk := lookup.New(lookup.Config{DB: e.db, Table: "acl_lookup", Redis: lookupRdb, Prefix: prefix + "lookup:"})
	if err := lk.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lk.Put(ctx, []sharding.Pair{{OrderID: 7, UserID: 70}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, err := lk.Resolve(ctx, []int64{7, 8}); err != nil || got[7] != 70 {
			t.Fatalf("lookup resolve: %v %v", got, err)
		}
	}
	if err := lk.Delete(ctx, []int64{7}); err != nil {
		t.Fatal(err)
	}
	if st := lk.Stats(); st.RedisErrors != 0 || st.Hits == 0 {
		t.Fatalf("lookup cache as the restricted user: %+v", st)
	}

	// The ID generator: lease, renew, release.
	g, err := sharding.NewIDGenerator(ctx, sharding.IDConfig{Redis: idgenRdb, Prefix: prefix + "idgen", LeaseTTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // a renewal every LeaseTTL/3
	if _, err := g.Next(1); err != nil {
		t.Fatal(err)
	}
	g.Close()
	run.stop()

	restCloseNothingDenied(t, e, s, deniedBefore, user, trackerUser, user+"-lookup", user+"-idgen")
}

// TestRedisACLDenied runs the plugin as a user allowed the documented
// commands but HGETALL, which reading the tracker's replay positions
// needs: the refusal is logged once as an ERROR naming the command, every
// refusal is counted (lsnstore.DeniedCommands, which
// freshread_store_denied_total exports), and reads and writes go on (the
// replicas are polled directly).
func TestRedisACLDenied(t *testing.T) {
	s := newACLServer(t)
	user := fmt.Sprintf("acldenied%d", time.Now().UnixNano())
	prefix := user + ":"
	rdb := s.user(user, prefix, strings.Replace(guideACL(t, "freshread"), "+hgetall ", "", 1))

	logs := &syncBuffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(logs, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })

	store := lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: "acl-" + user, Prefix: prefix})
	e := newEnv(t, withStore(store), withConfig(func(c *plugin.Config) { c.ReplayFromStore = true }))
	if err := e.db.Create(&Item{ID: 1, Name: "denied"}).Error; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "command=hgetall") {
		if time.Now().After(deadline) {
			t.Fatalf("no log names the refused HGETALL:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // more polls, more refusals: still one line
	out := logs.String()
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "command=hgetall") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "level=ERROR") || !strings.Contains(lines[0], "ACL SETUSER "+user+" +hgetall") {
		t.Fatalf("want one ERROR naming hgetall with the grant, got:\n%s", strings.Join(lines, "\n"))
	}
	if strings.Contains(out, "pw") {
		t.Errorf("the log holds the password:\n%s", out)
	}
	t.Logf("the log line: %s", lines[0])

	for deadline := time.Now().Add(10 * time.Second); lsnstore.DeniedCommands()["hgetall"] < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d refusals of hgetall counted (freshread_store_denied_total), want every one (at least 2)", lsnstore.DeniedCommands()["hgetall"])
		}
	}
	if n := len(strings.Split(logs.String(), "command=hgetall")) - 1; n != 1 {
		t.Fatalf("%d log lines name hgetall after more refusals, want one", n)
	}
	if entries := s.denied(user); len(entries) == 0 {
		t.Errorf("the server logged no refusal of %s", user)
	}

	// The plugin goes on: the write is read, fresh, from a replica.
	if got := e.eventuallyReplica(func() served { return e.readItem(e.db, 1) }, "item written without HGETALL"); got.Name != "denied" {
		t.Fatalf("fresh read: %+v", got)
	}
}

// waitPublished waits until the store holds a dependency graph (of any
// tables).
func waitPublished(t *testing.T, store lsnstore.DependentsStore) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := store.Dependents(context.Background())
		if err == nil && d.Version != "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("dependency graph not published in time: %+v (err %v)", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMariaDBRedisACL: the plugin on MariaDB (GTID positions) as a Redis
// user allowed exactly the guide's commands: a write, a fresh read on the
// replica, replay positions published, a schema change through the
// plugin that can add a dependency (its mark and the schema generation),
// a write after it, a rest and Close. Redis denies nothing.
func TestMariaDBRedisACL(t *testing.T) {
	s := newACLServer(t)
	ctx := context.Background()
	user := fmt.Sprintf("aclmaria%d", time.Now().UnixNano())
	prefix := user + ":"
	rdb := s.user(user, prefix, guideACL(t, "freshread"))
	deniedBefore := lsnstore.DeniedCommands()
	store := lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: "acl-" + user, Prefix: prefix})
	e := newEngineEnv(t, "mariadb", withStore(store), withConfig(func(c *plugin.Config) { c.IdleAfter = 300 * time.Millisecond }))
	if err := e.db.Create(&Item{ID: 1, Name: "acl"}).Error; err != nil {
		t.Fatal(err)
	}
	if got := e.eventuallyReplica(func() served { return e.readItem(e.db, 1) }, "item written as the restricted user"); got.Name != "acl" {
		t.Fatalf("fresh read: %+v", got)
	}
	waitReplayPositions(t, store, e.c.replicas())
	if err := e.db.Exec("CREATE VIEW acl_items AS SELECT id, name FROM items").Error; err != nil {
		t.Fatal(err)
	}
	if g, err := store.SchemaGeneration(ctx); err != nil || g == "" {
		t.Fatalf("schema generation after a view was created: %q, %v", g, err)
	}
	if err := e.db.Model(&Item{ID: 1}).Update("name", "after").Error; err != nil {
		t.Fatal(err)
	}
	if got := e.eventuallyReplica(func() served { return e.readItem(e.db, 1) }, "item written after the schema change"); got.Name != "after" {
		t.Fatalf("fresh read after the schema change: %+v", got)
	}
	restCloseNothingDenied(t, e, s, deniedBefore, user)
}

// waitReplayPositions waits, up to 10 s, for one replay position per
// replica (n) in store.
func waitReplayPositions(t *testing.T, store *lsnstore.Redis, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rp, err := store.ReplayPositions(context.Background())
		if err == nil && len(rp) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replay positions the plugin published: %v (err %v), want one per replica", rp, err)
		}
	}
}

// restCloseNothingDenied lets e's first plugin rest (the writer's and the
// poller's leases given up) and closes every plugin (the same, and the
// poller's snapshot), so their scripts run before the log is read; then
// nothing is denied: the ACL log has no entry of users, and the process
// counted no refusal since deniedBefore.
func restCloseNothingDenied(t *testing.T, e *env, s *aclServer, deniedBefore map[string]uint64, users ...string) {
	t.Helper()
	waitGauge(t, e.plug, "freshread_poller_resting", 1)
	e.mu.Lock()
	plugs := append([]*plugin.Plugin(nil), e.plugs...)
	e.mu.Unlock()
	for _, p := range plugs {
		p.Close()
	}
	for _, entry := range s.denied(users...) {
		t.Errorf("Redis denied a restricted user: %s", entry)
	}
	if n := lsnstore.DeniedCommands(); !maps.Equal(n, deniedBefore) {
		t.Errorf("refusals counted: %v, before the test %v", n, deniedBefore)
	}
}
