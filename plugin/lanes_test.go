package plugin

import (
	"testing"
	"time"

	"gorm.io/plugin/dbresolver"

	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/position"
)

func mustPosition(t *testing.T, s string) lsnstore.Position {
	t.Helper()
	p, err := lsnstore.ParsePosition(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFreshReplicaComparesEveryLane: a replica is fresh only when it is at
// or past the required position in every lane (GTID domain or source),
// with the random policy and with a configured one.
func TestFreshReplicaComparesEveryLane(t *testing.T) {
	now := time.Now()
	var replicas []*replica
	for _, st := range []struct{ name, pos string }{
		{"r1", "0/C8+7=0/3"}, // ahead in domain 0, behind in domain 7
		{"r2", "0/64+7=0/9"}, // the other way round
	} {
		r := &replica{name: st.name}
		r.pool = &replicaPool{r: r}
		r.state.Store(&replicaState{pos: mustPosition(t, st.pos), up: true, withinLag: true, polledAt: now})
		replicas = append(replicas, r)
	}
	for _, random := range []bool{true, false} {
		p := &Plugin{cfg: Config{MaxLag: time.Minute, Policy: dbresolver.RoundRobinPolicy()}, randomPolicy: random}
		p.replicaSet.Store(&replicas)
		for _, c := range []struct {
			required, want, best string
		}{
			{"0/64+7=0/5", "r2", ""},
			{"0/C8", "r1", ""},
			{"0/0+7=0/9", "r2", ""},
			{"0/C8+7=0/5", "", "0/C8+7=0/3"},      // nobody: r1 is least behind (2 against 100)
			{"0/C8+8=0/1", "", "0/C8+7=0/3"},      // a lane no replica has
			{"0/1F4+7=0/9", "", "0/C8+7=0/3"},     // r1 least behind (306 against 400)
			{"0/0", "either", ""},                 // the empty position: any replica
			{"0/64+7=0/3", "either", ""},          // both fresh
			{"0/64+7=0/3+9=0/0", "either", ""},    // a zero lane requires nothing
			{"0/65+7=0/4", "", "0/C8+7=0/3"},      // each is behind in one lane
			{"0/64+7=0/A", "", "0/64+7=0/9"},      // r2 short by one in domain 7
			{"0/C9+7=0/3", "", "0/C8+7=0/3"},      // r1 short by one in domain 0
			{"0/0+7=0/3", "either", ""},           // lane 7 only
			{"0/0+7=0/4", "r2", ""},               // lane 7 only, r1 behind
			{"0/C8+7=0/0", "r1", ""},              // main only, spelled with a zero lane
			{"0/64+7=0/9+7x=0/0", "r2", ""},       // zero lanes are dropped when parsed
			{"0/64+6=0/0+7=0/9", "r2", ""},        // in any order
			{"0/0+7=0/9+6=0/0", "r2", ""},         // likewise
			{"0/C8+7=0/3+6=0/0", "r1", ""},        // likewise
			{"0/C8+6=0/1", "", "0/C8+7=0/3"},      // lane 6: neither has it
			{"0/1+6=0/1+7=0/1", "", "0/C8+7=0/3"}, // equal lag (1 each): the first replica
		} {
			pool, best := p.freshReplica(mustPosition(t, c.required))
			got := ""
			if pool != nil {
				got = pool.(*replicaPool).r.name
			}
			switch {
			case c.want == "either" && got == "":
				t.Errorf("random=%v required %s: no replica; want one", random, c.required)
			case c.want != "either" && got != c.want:
				t.Errorf("random=%v required %s: replica %q; want %q", random, c.required, got, c.want)
			}
			if c.best != "" && best.String() != c.best {
				t.Errorf("random=%v required %s: best %s; want %s", random, c.required, best, c.best)
			}
		}
	}
}

// TestMariaDBPositionLanes: GTID lists map to positions with domain 0 in
// the main lane and back to the list MASTER_GTID_WAIT is given.
func TestMariaDBPositionLanes(t *testing.T) {
	for _, c := range []struct{ list, pos, wait string }{
		{"0-1-100", "0/64", "0-9-100"},
		{"0-1-100,7-2-20", "0/64+7=0/14", "0-9-100,7-9-20"},
		{"7-2-20", "0/0+7=0/14", "7-9-20"},
		{"", "0/0", ""},
		{"1-1-5,0-1-1,10-3-7", "0/1+1=0/5+10=0/7", "0-9-1,1-9-5,10-9-7"},
	} {
		l, err := position.ParseMariaDBGTIDList(c.list)
		if err != nil {
			t.Fatal(err)
		}
		pos := mariadbPosition(l)
		if pos.String() != c.pos {
			t.Errorf("mariadbPosition(%q) = %s; want %s", c.list, pos, c.pos)
		}
		wait, err := mariadbGTIDList(pos, 9)
		if err != nil || wait != c.wait {
			t.Errorf("mariadbGTIDList(%s) = %q, %v; want %q", pos, wait, err, c.wait)
		}
	}
	if _, err := mariadbGTIDList(mustPosition(t, "0/1+3e11fa47-71ca-11e1-9e33-c80aa9429562=0/1"), 1); err == nil {
		t.Error("a MySQL source lane became a MariaDB GTID")
	}
}

// TestMySQLPositionLanes: a GTID set maps to a lane per source; a primary
// publishes each source's last number, a replica its contiguous prefix,
// and WAIT_FOR_EXECUTED_GTID_SET is given source:1-n per lane.
func TestMySQLPositionLanes(t *testing.T) {
	const a, b = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "8a94f357-aab4-11df-86ab-c80aa9429563"
	primary, err := position.ParseMySQLGTIDSet(a + ":1-100:200-300," + b + ":1-9:tag1:1-3")
	if err != nil {
		t.Fatal(err)
	}
	write, err := mysqlPosition(primary.Lasts())
	if err != nil {
		t.Fatal(err)
	}
	if want := "0/0+" + a + "=0/12C+" + b + "=0/9+" + b + ":tag1=0/3"; write.String() != want {
		t.Fatalf("write position %s; want %s", write, want)
	}
	if want := a + ":1-300," + b + ":1-9," + b + ":tag1:1-3"; mysqlWaitSet(write) != want {
		t.Fatalf("wait set %s; want %s", mysqlWaitSet(write), want)
	}
	for _, c := range []struct {
		replica string
		covers  bool
	}{
		{a + ":1-300," + b + ":1-9:tag1:1-3", true},
		{a + ":1-100:200-300," + b + ":1-9:tag1:1-3", false}, // the same gaps: prefix 100 < 300 (conservative)
		{a + ":1-300," + b + ":1-9", false},                  // tagged source missing
		{a + ":1-299," + b + ":1-9:tag1:1-3", false},
		{a + ":1-400," + b + ":1-10:tag1:1-3:tag2:1", true},
		{a + ":2-300," + b + ":1-9:tag1:1-3", false}, // transaction 1 missing
	} {
		set, err := position.ParseMySQLGTIDSet(c.replica)
		if err != nil {
			t.Fatal(err)
		}
		rp, err := mysqlPosition(set.Prefixes())
		if err != nil {
			t.Fatal(err)
		}
		if got := rp.Covers(write); got != c.covers {
			t.Errorf("replica %s (position %s) covers %s = %v; want %v", c.replica, rp, write, got, c.covers)
		}
		// Covering never claims more than GTID_SUBSET: the replica's set
		// then contains every GTID the primary had.
		if rp.Covers(write) && !set.Contains(primary) {
			t.Errorf("replica %s covers the write without containing the primary's set", c.replica)
		}
	}
	if mysqlWaitSet(lsnstore.Position{}) != "" {
		t.Error("empty position: non-empty wait set")
	}
}
