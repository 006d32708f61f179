package integration_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/lib/faults"
	"github.com/freshread/freshread/sharding"
)

// An Update over two PostgreSQL shards outside any transaction commits
// with two-phase commit: whichever step fails, the statement leaves both
// shards' rows old or both new, never one of each, and no prepared part
// stays behind. Each case makes one step fail (as a process dying or a
// shard lost there would): a part's PREPARE (nothing is written), the
// coordinator's COMMIT (its outcome unknown to the statement: the
// prepared part follows it, rolled back by recovery), and a part's
// COMMIT PREPARED after the decision (ErrCommitPending: recovery commits
// it). With every replica paused, the part recovery commits is read new
// through the router: its commit is published by the shard's plugin.
// Before, the parts committed one after the other, and a failure after
// the first commit left one shard's rows new and the other's old.
func TestShardingTwoPhaseCommit(t *testing.T) {
	e := newShEnv(t)
	a, b, _, _ := keyChangeUsers(t, e)
	shardA, shardB := e.s.ShardOf(a), e.s.ShardOf(b) // shard names start with "s"
	e.mustCreate(&ShOrder{ID: 9500, UserID: a, Status: "v0"}, &ShOrder{ID: 9600, UserID: b, Status: "v0"})
	fail := errors.New("injected failure")
	step := 0
	for _, c := range []struct {
		name    string
		at      string // the failing step
		applied bool   // whether the write ends applied
		pending bool   // ErrCommitPending expected
	}{
		{"no failure", "", true, false},
		{"a part's prepare fails", "sharding: prepare ", false, false},
		{"the coordinator's commit fails", "sharding: commit s", false, false},
		{"a part's commit after the decision fails", "sharding: commit prepared ", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			step++
			status := "v" + string(rune('0'+step))
			before := e.statusOf(9500, 9600)
			e.waitCaughtUp()
			e.pauseAll()
			injected := 0
			restore := faults.Set(func(s string) error {
				if c.at != "" && strings.HasPrefix(s, c.at) && injected == 0 {
					injected++
					return fail
				}
				return nil
			})
			err := e.db.Model(&ShOrder{}).Where("user_id IN ?", []int64{a, b}).Update("status", status).Error
			restore()
			switch {
			case c.at == "" && err != nil:
				t.Fatalf("update: %v", err)
			case c.at != "" && injected == 0:
				t.Fatalf("step %q never ran: the write did not use two-phase commit", c.at)
			case c.at != "" && err == nil:
				t.Fatal("update succeeded despite the injected failure")
			case c.pending != errors.Is(err, sharding.ErrCommitPending):
				t.Fatalf("err %v, ErrCommitPending %v", err, c.pending)
			}
			want := before
			if c.applied {
				want = [2]string{status, status}
			}
			// Recovery resolves a part left prepared within seconds.
			deadline := time.Now().Add(20 * time.Second)
			for {
				// The parts first: with none left, the statuses read
				// after are final.
				left := e.preparedParts()
				got := e.statusOf(9500, 9600)
				if got == want && left == 0 {
					break
				}
				if got[0] != got[1] && left == 0 {
					t.Fatalf("shard %s holds %q and shard %s %q with nothing prepared: a partial write (%v)", shardA, got[0], shardB, got[1], err)
				}
				if time.Now().After(deadline) {
					t.Fatalf("statuses %v with %d prepared parts, want %v and none (%v)", got, left, want, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			// Read through the router with every replica paused: a part
			// committed by recovery must not be read old from a replica.
			var rows []ShOrder
			if err := e.db.Where("user_id IN ?", []int64{a, b}).Order("id").Find(&rows).Error; err != nil {
				t.Fatal(err)
			}
			if len(rows) != 2 || rows[0].Status != want[0] || rows[1].Status != want[1] {
				t.Fatalf("read %+v through the router, want statuses %v", rows, want)
			}
			e.resumeAll()
		})
	}
}

// A process that dies after the decision, before committing a part,
// leaves the part prepared; the next process that installs the plugin
// commits it (recovery at install), and the rows read through it are the
// new ones.
func TestShardingTwoPhaseRecoveredByNextProcess(t *testing.T) {
	armed, started, restore := dyingCoordinator()
	defer restore()
	e := newShEnv(t)
	a, b, _, _ := keyChangeUsers(t, e)
	e.mustCreate(&ShOrder{ID: 9700, UserID: a, Status: "old"}, &ShOrder{ID: 9800, UserID: b, Status: "old"})
	armed.Store(true)
	err := e.db.Model(&ShOrder{}).Where("user_id IN ?", []int64{a, b}).Update("status", "new").Error
	if !errors.Is(err, sharding.ErrCommitPending) {
		t.Fatalf("err %v, want ErrCommitPending", err)
	}
	if n := e.preparedParts(); n != 1 {
		t.Fatalf("%d prepared parts after the process died, want 1", n)
	}
	started.Store(true)
	db2, _ := e.another() // the restarted process
	waitNoPrepared(t, e.preparedParts, 20*time.Second, "the next process left the part prepared")
	if got := e.statusOf(9700, 9800); got != [2]string{"new", "new"} {
		t.Fatalf("statuses %v after recovery, want both new", got)
	}
	var rows []ShOrder
	if err := db2.Where("user_id IN ?", []int64{a, b}).Order("id").Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Status != "new" || rows[1].Status != "new" {
		t.Fatalf("read %+v through the next process, want both new", rows)
	}
}

// dyingCoordinator makes this process die (a fault) after a cross-shard
// write's decision, before committing its parts, once armed. Its own
// recovery pass at install runs in the background and may run late on a
// loaded machine, after the write: it is held off from the start (a check
// made before the write could still let it list the part after), until
// started says the next process starts.
func dyingCoordinator() (armed, started *atomic.Bool, restore func()) {
	dead := errors.New("the process died here")
	armed, started = new(atomic.Bool), new(atomic.Bool)
	restore = faults.Set(func(s string) error {
		switch {
		case s == "sharding: recovery at start" && !started.Load():
			return dead
		case armed.Load() && (strings.HasPrefix(s, "sharding: commit prepared ") || s == "sharding: recovery round"):
			return dead
		}
		return nil
	})
	return armed, started, restore
}

// waitNoPrepared waits until prepared reports no prepared part, failing
// with what after within.
func waitNoPrepared(t *testing.T, prepared func() int, within time.Duration, what string) {
	t.Helper()
	for deadline := time.Now().Add(within); prepared() != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
	}
}

// statusOf returns the statuses of orders x and y read on their shards'
// primaries.
func (e *shEnv) statusOf(x, y int64) [2]string {
	e.t.Helper()
	var out [2]string
	for _, rows := range e.shardRows() {
		for _, r := range rows {
			switch r.ID {
			case x:
				out[0] = r.Status
			case y:
				out[1] = r.Status
			}
		}
	}
	return out
}

// preparedParts counts the prepared transactions on the shards'
// databases.
func (e *shEnv) preparedParts() int {
	e.t.Helper()
	n := 0
	for _, name := range e.names {
		var c int
		if err := e.direct[name].Raw("SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()").Scan(&c).Error; err != nil {
			e.t.Fatal(err)
		}
		n += c
	}
	return n
}
