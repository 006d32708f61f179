package integration_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/internal/lib/faults"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/sharding"
)

// xaEnv: two MariaDB shards (databases of the shared primary), each with
// its freshread plugin over the replica, and the sharding plugin on a
// default database.
type xaEnv struct {
	t      *testing.T
	m      *testcluster.MariaDB
	def    string
	dbs    map[string]string // shard -> database
	direct map[string]*gorm.DB
	names  []string
	db     *gorm.DB
	s      *sharding.Sharding
	a, b   int64 // users on m0 and m1
	// redis: the shards' plugins share positions in Redis (writer leases
	// and tags), in a store per shard; memory stores otherwise.
	redis bool
	// config changes the sharding plugin's Config of every process.
	config func(*sharding.Config)
}

func newXAEnv(t *testing.T) *xaEnv {
	t.Helper()
	return newXAEnvN(t, 2)
}

// newXAEnvN is newXAEnv with n shards, m0 to m(n-1).
func newXAEnvN(t *testing.T, n int) *xaEnv {
	t.Helper()
	return newXAEnvStore(t, n, false)
}

// newXAEnvStore is newXAEnvN, with Redis stores when redis is set.
func newXAEnvStore(t *testing.T, n int, redis bool) *xaEnv {
	t.Helper()
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("m%d", i))
	}
	return newXAEnvWith(t, names, redis, nil)
}

// newXAEnvWith is newXAEnvStore with the shards named names (the first
// holds user a, the second user b) and the Config changed by config.
func newXAEnvWith(t *testing.T, names []string, redis bool, config func(*sharding.Config)) *xaEnv {
	t.Helper()
	m := testcluster.MariaDBFor(t)
	e := &xaEnv{t: t, m: m, dbs: map[string]string{}, direct: map[string]*gorm.DB{}, redis: redis, names: names, config: config}
	e.def = m.CreateDatabase(t)
	for _, n := range e.names {
		e.dbs[n] = m.CreateDatabase(t)
		d, err := gorm.Open(mysql.Open(m.PrimaryDSN(e.dbs[n])), quiet())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeDB(d) })
		if err := d.AutoMigrate(&ShOrder{}, &ShItem{}); err != nil {
			t.Fatal(err)
		}
		e.direct[n] = d
	}
	e.db, e.s = e.open()
	for u := int64(2); e.b == 0; u++ {
		if e.s.ShardOf(u) != e.s.ShardOf(1) {
			e.a, e.b = 1, u
		}
	}
	if e.s.ShardOf(e.a) != e.names[0] {
		e.a, e.b = e.b, e.a
	}
	return e
}

// open opens a process: the sharding plugin and the shards' freshread
// plugins (their own pools).
func (e *xaEnv) open() (*gorm.DB, *sharding.Sharding) {
	e.t.Helper()
	var shards []sharding.ShardConfig
	for _, n := range e.names {
		fc := plugin.Config{PollInterval: 5 * time.Millisecond}
		if e.redis {
			fc.Store, _ = newRedisStore(e.t, "xa-"+e.dbs[n])
		}
		shards = append(shards, sharding.ShardConfig{
			Name:      n,
			Dialector: mysql.Open(e.m.PrimaryDSN(e.dbs[n])),
			Replicas:  []plugin.Replica{{Name: "r0", Dialector: mysql.Open(e.m.ReplicaDSN(e.dbs[n]))}},
			Freshness: fc,
		})
	}
	cfg := sharding.Config{
		Tables:    []sharding.Table{{Name: "orders", Key: "user_id", ID: "id"}, {Name: "order_items", Key: "user_id"}},
		Shards:    shards,
		Algorithm: sharding.EvenBuckets(1024, e.names...),
	}
	if e.config != nil {
		e.config(&cfg)
	}
	return openSharded(e.t, mysql.Open(e.m.PrimaryDSN(e.def)), cfg)
}

// statuses reads orders x (on m0) and y (on m1) from the shards'
// primaries directly.
func (e *xaEnv) statuses(x, y int64) [2]string {
	e.t.Helper()
	var out [2]string
	for i, c := range []struct {
		shard string
		id    int64
	}{{"m0", x}, {"m1", y}} {
		var o ShOrder
		if err := e.direct[c.shard].Where("id = ?", c.id).Take(&o).Error; err != nil {
			e.t.Fatal(err)
		}
		out[i] = o.Status
	}
	return out
}

// prepared counts the plugin's prepared XA transactions of the shards'
// databases on the server.
func (e *xaEnv) prepared() int {
	e.t.Helper()
	rows, err := e.direct["m0"].Raw("XA RECOVER").Rows()
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var f, gl, bl int
		var data []byte
		if err := rows.Scan(&f, &gl, &bl, &data); err != nil {
			e.t.Fatal(err)
		}
		if !strings.HasPrefix(string(data), "freshread:") || gl > len(data) {
			continue
		}
		for _, db := range e.dbs {
			if string(data[gl:]) == db {
				n++
			}
		}
	}
	return n
}

// decisionRows counts the rows of the coordinator's decision table.
func (e *xaEnv) decisionRows() int {
	e.t.Helper()
	var n int
	if err := e.direct["m0"].Raw("SELECT count(*) FROM freshread_xa_decisions").Scan(&n).Error; err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *xaEnv) plugins(s *sharding.Sharding) []*plugin.Plugin {
	var out []*plugin.Plugin
	for _, n := range e.names {
		if p, err := s.Freshness(n); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func (e *xaEnv) caughtUp() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.m.WaitCaughtUp(ctx); err != nil {
		e.t.Fatal(err)
	}
	waitPluginsCaughtUp(e.t, e.plugins(e.s))
}

func (e *xaEnv) pause() {
	e.t.Helper()
	if err := e.m.StopApply(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = e.m.StartApply(context.Background()) })
}

func (e *xaEnv) resume() {
	e.t.Helper()
	if err := e.m.StartApply(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.caughtUp()
}

// readBoth reads the two orders through db (the router and the shards'
// plugins).
func (e *xaEnv) readBoth(db *gorm.DB) [2]string {
	e.t.Helper()
	var rows []ShOrder
	if err := db.Where("user_id IN ?", []int64{e.a, e.b}).Order("id").Find(&rows).Error; err != nil {
		e.t.Fatal(err)
	}
	if len(rows) != 2 {
		e.t.Fatalf("read %d rows through the router, want 2", len(rows))
	}
	return [2]string{rows[0].Status, rows[1].Status}
}

// An Update over two MariaDB shards outside any transaction commits with
// XA (the shards' plugins on memory stores, and on Redis stores, whose
// writer tags the parts' XA COMMIT takes): whichever step fails, both shards' rows end old or both new, and no
// prepared part stays behind. Each case makes one step fail, as a process
// dying or a shard lost there would: a part's XA PREPARE (nothing is
// written), the coordinator's COMMIT (its outcome unknown to the
// statement: the part, detached, is rolled back by recovery, which finds
// no decision), and a part's XA COMMIT after the decision
// (ErrCommitPending: recovery commits it). With the replica stopped, the
// rows are read through the router: every commit, the part's own and the
// one recovery makes, is published by the shard's plugin. Before, the
// parts committed one after the other, and a failure after the first
// commit left one shard new and the other old.
func TestMariaDBShardingXACommit(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) { xaCommitSteps(t, newXAEnvStore(t, 2, store == "redis")) })
	}
}

func xaCommitSteps(t *testing.T, e *xaEnv) {
	if err := e.db.Create([]*ShOrder{{ID: 9500, UserID: e.a, Status: "v0"}, {ID: 9600, UserID: e.b, Status: "v0"}}).Error; err != nil {
		t.Fatal(err)
	}
	fail := errors.New("injected failure")
	for i, c := range []struct {
		name    string
		at      string // the failing step
		applied bool
		pending bool
	}{
		{"no failure", "", true, false},
		{"a part's prepare fails", "sharding: prepare ", false, false},
		{"the coordinator's commit fails", "sharding: commit m", false, false},
		{"a part's commit after the decision fails", "sharding: commit prepared ", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			status := "v" + string(rune('1'+i))
			before := e.statuses(9500, 9600)
			e.caughtUp()
			e.pause()
			var injected, ran atomic.Int32
			restore := faults.Set(func(s string) error {
				if strings.HasPrefix(s, "sharding: prepare ") {
					ran.Add(1)
				}
				if c.at != "" && strings.HasPrefix(s, c.at) && injected.Add(1) == 1 {
					return fail
				}
				return nil
			})
			err := e.db.Model(&ShOrder{}).Where("user_id IN ?", []int64{e.a, e.b}).Update("status", status).Error
			restore()
			switch {
			case ran.Load() == 0:
				t.Fatalf("no part was prepared: the write did not use XA (%v)", err)
			case c.at == "" && err != nil:
				t.Fatalf("update: %v", err)
			case c.at != "" && err == nil:
				t.Fatal("update succeeded despite the injected failure")
			case c.pending != errors.Is(err, sharding.ErrCommitPending):
				t.Fatalf("err %v, ErrCommitPending %v", err, c.pending)
			}
			want := before
			if c.applied {
				want = [2]string{status, status}
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				left := e.prepared() // first: with none left, the statuses read after are final
				got := e.statuses(9500, 9600)
				if got == want && left == 0 {
					break
				}
				if got[0] != got[1] && left == 0 {
					t.Fatalf("m0 holds %q and m1 %q with nothing prepared: a partial write (%v)", got[0], got[1], err)
				}
				if time.Now().After(deadline) {
					t.Fatalf("statuses %v with %d prepared parts, want %v and none (%v)", got, left, want, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if got := e.readBoth(e.db); got != want {
				t.Fatalf("read %v through the router with the replica stopped, want %v", got, want)
			}
			e.resume()
		})
	}
	// Every decision is gone once its parts are resolved and swept.
	if _, err := e.s.RecoverPrepared(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := e.decisionRows(); n != 0 {
		t.Fatalf("%d decision rows left after the parts were resolved and RecoverPrepared swept", n)
	}
}

// A process that dies after the decision, before committing its part,
// leaves the part prepared (MariaDB keeps it past the connection); the
// next process that installs the plugin commits it, and reads it new with
// the replica stopped before that commit.
func TestMariaDBShardingXARecoveredByNextProcess(t *testing.T) {
	armed, started, restore := dyingCoordinator()
	defer restore()
	e := newXAEnv(t)
	if err := e.db.Create([]*ShOrder{{ID: 9700, UserID: e.a, Status: "old"}, {ID: 9800, UserID: e.b, Status: "old"}}).Error; err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	err := e.db.Model(&ShOrder{}).Where("user_id IN ?", []int64{e.a, e.b}).Update("status", "new").Error
	if !errors.Is(err, sharding.ErrCommitPending) {
		t.Fatalf("err %v, want ErrCommitPending", err)
	}
	// The replica replays the decision and the prepare, not the commit
	// recovery makes (the next process shares no store with this one).
	e.caughtUp()
	e.pause()
	if n := e.prepared(); n != 1 {
		t.Fatalf("%d prepared parts after the process died, want 1", n)
	}
	if got := e.statuses(9700, 9800); got != [2]string{"new", "old"} {
		t.Fatalf("statuses %v before recovery, want the coordinator's new and the part's old", got)
	}
	started.Store(true)
	db2, s2 := e.open() // the restarted process
	waitNoPrepared(t, e.prepared, 30*time.Second, "the next process left the part prepared")
	if got := e.statuses(9700, 9800); got != [2]string{"new", "new"} {
		t.Fatalf("statuses %v after recovery, want both new", got)
	}
	if got := e.readBoth(db2); got != [2]string{"new", "new"} {
		t.Fatalf("read %v through the next process with the replica stopped, want both new", got)
	}
	if _, err := s2.RecoverPrepared(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := e.decisionRows(); n != 0 {
		t.Fatalf("%d decision rows left after recovery swept", n)
	}
}

// Recovery never decides a write whose coordinator transaction is still
// open. Just before the coordinator commits, the part's connection is
// killed (the part, prepared, is detached: anyone may resolve it) and
// another process runs recovery: it finds no decision row and must leave
// the part, not roll it back, because the coordinator holds its own
// uncommitted row. The coordinator then commits; the part, whose
// connection is gone, is committed by recovery; both rows end new.
func TestMariaDBShardingXARecoveryWaitsForCoordinator(t *testing.T) {
	e := newXAEnv(t)
	if err := e.db.Create([]*ShOrder{{ID: 9900, UserID: e.a, Status: "old"}, {ID: 9901, UserID: e.b, Status: "old"}}).Error; err != nil {
		t.Fatal(err)
	}
	_, s2 := e.open()
	var hooked atomic.Bool
	var left int
	var recErr error
	restore := faults.Set(func(s string) error {
		if s != "sharding: commit m0" || !hooked.CompareAndSwap(false, true) {
			return nil
		}
		// Kill m1's idle connections of this database: the part's among them.
		var ids []int64
		if err := e.direct["m0"].Raw("SELECT id FROM information_schema.PROCESSLIST WHERE db = ? AND command = 'Sleep'", e.dbs["m1"]).Scan(&ids).Error; err != nil {
			return err
		}
		for _, id := range ids {
			_ = e.direct["m0"].Exec("KILL CONNECTION ?", id).Error
		}
		left, recErr = s2.RecoverPrepared(context.Background())
		return nil
	})
	err := e.db.Model(&ShOrder{}).Where("user_id IN ?", []int64{e.a, e.b}).Update("status", "new").Error
	restore()
	if !hooked.Load() {
		t.Fatalf("the coordinator's commit step never ran (%v)", err)
	}
	if recErr != nil || left == 0 {
		t.Fatalf("recovery during the open coordinator: left %d, err %v; want the part left", left, recErr)
	}
	if !errors.Is(err, sharding.ErrCommitPending) {
		t.Fatalf("err %v, want ErrCommitPending (the part's connection was killed)", err)
	}
	waitNoPrepared(t, e.prepared, 30*time.Second, "the part stayed prepared")
	if got := e.statuses(9900, 9901); got != [2]string{"new", "new"} {
		t.Fatalf("statuses %v, want both new: recovery decided the write while its coordinator was open", got)
	}
}

// A prepared part outlives its server's restart: the shard's primary
// restarts after the decision, before the part's XA COMMIT. The write
// reports ErrCommitPending, and recovery commits the part once the server
// is back: both rows end new.
func TestMariaDBShardingXASurvivesPrimaryRestart(t *testing.T) {
	e := newXAEnv(t)
	if err := e.db.Create([]*ShOrder{{ID: 9950, UserID: e.a, Status: "old"}, {ID: 9951, UserID: e.b, Status: "old"}}).Error; err != nil {
		t.Fatal(err)
	}
	var restarted atomic.Bool
	restore := faults.Set(func(s string) error {
		if !strings.HasPrefix(s, "sharding: commit prepared ") || !restarted.CompareAndSwap(false, true) {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := e.m.RestartPrimary(ctx); err != nil {
			t.Errorf("restart the primary: %v", err)
		}
		return errors.New("the shard's server restarted")
	})
	defer restore()
	err := e.db.Model(&ShOrder{}).Where("user_id IN ?", []int64{e.a, e.b}).Update("status", "new").Error
	if !restarted.Load() {
		t.Fatalf("no part reached its commit (%v)", err)
	}
	if !errors.Is(err, sharding.ErrCommitPending) {
		t.Fatalf("err %v, want ErrCommitPending", err)
	}
	waitNoPrepared(t, e.prepared, time.Minute, "the part stayed prepared after the restart")
	if got := e.statuses(9950, 9951); got != [2]string{"new", "new"} {
		t.Fatalf("statuses %v after the restart and recovery, want both new", got)
	}
}

// Writes over four MariaDB shards, each round with one step of XA made to
// fail (or none): a part's prepare, the coordinator's commit, a part's
// commit after the decision, each at a random part. Whatever failed,
// once no part is left prepared every write is whole or absent: an
// Update's four rows all new or all old, a Create's (and a
// CreateInBatches') four rows all stored or none; and a write reported
// committed (nil, ErrCommitPending) is whole, one reported failed before
// its decision is absent.
func TestMariaDBShardingXAAtomicUnderFaults(t *testing.T) {
	e := newXAEnvN(t, 4)
	if err := atomicUnderFaults(e.db, e.s, e.direct, e.prepared, "sharding: commit m"); err != nil {
		t.Fatal(err)
	}
}

// The same over four PostgreSQL shards (two-phase commit).
func TestShardingTwoPhaseAtomicUnderFaults(t *testing.T) {
	e := newShEnv(t)
	if err := atomicUnderFaults(e.db, e.s, e.direct, e.preparedParts, "sharding: commit s"); err != nil {
		t.Fatal(err)
	}
}

// atomicUnderFaults runs TestMariaDBShardingXAAtomicUnderFaults' rounds on
// db (the sharding plugin s over four shards, direct their primaries) and
// returns the first failure; prepared counts the parts left prepared, and
// commitStep is the fault step of the coordinator's commit ("sharding:
// commit " and the start of every shard's name).
func atomicUnderFaults(db *gorm.DB, s *sharding.Sharding, direct map[string]*gorm.DB, prepared func() int, commitStep string) error {
	var users []int64
	seen := map[string]bool{}
	for u := int64(1); len(users) < 4; u++ {
		if sh := s.ShardOf(u); !seen[sh] {
			seen[sh] = true
			users = append(users, u)
		}
	}
	for i, u := range users {
		if err := db.Create(&ShOrder{ID: int64(10000 + i), UserID: u, Status: "s0"}).Error; err != nil {
			return err
		}
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	steps := []string{"", "sharding: prepare ", commitStep, "sharding: commit prepared "}
	count := func(ids []int64) (int, error) {
		n := 0
		for _, d := range direct {
			var c int64
			if err := d.Model(&ShOrder{}).Where("id IN ?", ids).Count(&c).Error; err != nil {
				return 0, err
			}
			n += int(c)
		}
		return n, nil
	}
	statuses := func() (map[string]int, error) {
		out := map[string]int{}
		for _, d := range direct {
			var rows []ShOrder
			if err := d.Where("id >= 10000 AND id < 10004").Find(&rows).Error; err != nil {
				return nil, err
			}
			for _, r := range rows {
				out[r.Status]++
			}
		}
		return out, nil
	}
	for round := 1; round <= 36; round++ {
		step := steps[rng.Intn(len(steps))]
		at := 1 + rng.Intn(3) // which matching call fails (of three parts)
		if step == commitStep {
			at = 1 // one coordinator
		}
		calls := 0
		restore := faults.Set(func(s string) error {
			if step != "" && strings.HasPrefix(s, step) {
				calls++
				if calls == at {
					return errors.New("injected failure")
				}
			}
			return nil
		})
		var err error
		var ids []int64
		shape := round % 3
		switch shape {
		case 0:
			err = db.Model(&ShOrder{}).Where("user_id IN ?", users).Update("status", fmt.Sprintf("s%d", round)).Error
		case 1, 2:
			var rows []*ShOrder
			for i, u := range users {
				id := int64(20000 + round*10 + i)
				ids = append(ids, id)
				rows = append(rows, &ShOrder{ID: id, UserID: u, Status: "new"})
			}
			if shape == 1 {
				err = db.Create(rows).Error
			} else {
				err = db.CreateInBatches(rows, 2).Error
			}
		}
		restore()
		fired := step != "" && calls >= at
		if step != "" && !fired {
			return fmt.Errorf("round %d: step %q ran %d times, never the %dth: the write did not commit in two phases (%v)", round, step, calls, at, err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for prepared() != 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("round %d (%q, call %d): parts stayed prepared", round, step, at)
			}
			time.Sleep(50 * time.Millisecond)
		}
		committed := err == nil || errors.Is(err, sharding.ErrCommitPending)
		failedBefore := fired && (step == "sharding: prepare " || step == commitStep)
		var applied bool
		if shape == 0 {
			st, serr := statuses()
			if serr != nil {
				return serr
			}
			if len(st) != 1 {
				return fmt.Errorf("round %d (%q, call %d, err %v): the four rows hold %v: a partial Update", round, step, at, err, st)
			}
			applied = st[fmt.Sprintf("s%d", round)] == 4
		} else {
			n, cerr := count(ids)
			if cerr != nil {
				return cerr
			}
			if n != 0 && n != 4 {
				return fmt.Errorf("round %d (%q, call %d, err %v): %d of the 4 rows stored: a partial Create", round, step, at, err, n)
			}
			applied = n == 4
		}
		switch {
		case committed && !applied:
			return fmt.Errorf("round %d (%q, call %d): reported committed (%v), not applied", round, step, at, err)
		case failedBefore && applied:
			return fmt.Errorf("round %d (%q, call %d): failed before its decision (%v), applied", round, step, at, err)
		}
	}
	return nil
}

// A write over shards that cannot commit it atomically (here MariaDB
// shards whose names do not fit XA's global transaction ID: the
// coordinator's name is longer than 37 bytes) is refused with
// ErrNoAtomicCommit, and nothing of it is written; with
// Config.SequentialCommits it commits shard by shard. Before, it committed
// shard by shard by default, with only a warning at its first use: a
// failure between the commits left part of it.
func TestShardingNoAtomicCommitRefused(t *testing.T) {
	long := strings.Repeat("x", 40)
	e := newXAEnvWith(t, []string{"s0-" + long, "s1-" + long}, false, nil)
	x := ShOrder{ID: 9300, UserID: e.a, Status: "old"}
	y := ShOrder{ID: 9301, UserID: e.b, Status: "old"}
	for _, o := range []*ShOrder{&x, &y} {
		if err := e.db.Create(o).Error; err != nil {
			t.Fatal(err)
		}
	}
	both := func() [2]string {
		var out [2]string
		for i, o := range []ShOrder{x, y} {
			var got ShOrder
			if err := e.direct[e.names[i]].Where("id = ?", o.ID).Take(&got).Error; err != nil {
				t.Fatal(err)
			}
			out[i] = got.Status
		}
		return out
	}
	update := func(db *gorm.DB, status string) error {
		return db.Model(&ShOrder{}).Where("user_id IN ?", []int64{e.a, e.b}).Update("status", status).Error
	}
	err := update(e.db, "new")
	if !errors.Is(err, sharding.ErrNoAtomicCommit) {
		t.Fatalf("an Update over two shards without XA: %v, want ErrNoAtomicCommit", err)
	}
	if got := both(); got != [2]string{"old", "old"} {
		t.Fatalf("after the refused Update the shards hold %v, want both old", got)
	}
	if err := e.db.Create(&[]ShOrder{{ID: 9310, UserID: e.a, Status: "c"}, {ID: 9311, UserID: e.b, Status: "c"}}).Error; !errors.Is(err, sharding.ErrNoAtomicCommit) {
		t.Fatalf("a Create over two shards without XA: %v, want ErrNoAtomicCommit", err)
	}
	var created int64
	for _, n := range e.names {
		var c int64
		if err := e.direct[n].Model(&ShOrder{}).Where("status = 'c'").Count(&c).Error; err != nil {
			t.Fatal(err)
		}
		created += c
	}
	if created != 0 {
		t.Fatalf("the refused Create left %d rows", created)
	}

	e.config = func(c *sharding.Config) { c.SequentialCommits = true }
	db, _ := e.open()
	if err := update(db, "new"); err != nil {
		t.Fatalf("an Update over two shards with SequentialCommits: %v", err)
	}
	if got := both(); got != [2]string{"new", "new"} {
		t.Fatalf("after the Update with SequentialCommits the shards hold %v, want both new", got)
	}
}
