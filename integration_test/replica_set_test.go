package integration_test

import (
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/freshreadprom"
	"github.com/freshread/freshread/internal/harness/dnstest"
	"github.com/freshread/freshread/plugin"
)

// churn is a read/write load on e.db: one writer raises the version of
// items 1..hot and remembers each version once its commit returned;
// readers read items 1..hot+cold (the cold ones are never written) with
// the answering server's port, and count a read stale when its version
// is below the one committed before the read began, and failed when it
// returns an error.
type churn struct {
	e         *env
	hot, cold uint
	committed []atomic.Int64
	phase     atomic.Int32

	stop                  chan struct{}
	stopOnce              sync.Once
	wg                    sync.WaitGroup
	reads, stale, failed  atomic.Int64
	writes, writeFailures atomic.Int64

	mu       sync.Mutex
	served   map[[2]int]int // [phase, port] → reads
	problems []string       // the first few stale or failed reads
}

// seedChurn creates items 1..n and waits until the replicas have them.
func seedChurn(e *env, n uint) {
	e.t.Helper()
	for id := uint(1); id <= n; id++ {
		if err := e.db.Create(&Item{ID: id, Name: fmt.Sprintf("item %d", id)}).Error; err != nil {
			e.t.Fatal(err)
		}
	}
	e.waitCaughtUp()
}

// startChurn starts the writer and readers on items seeded by seedChurn.
func startChurn(e *env, hot, cold uint, readers int) *churn {
	e.t.Helper()
	c := &churn{e: e, hot: hot, cold: cold, committed: make([]atomic.Int64, hot+1), stop: make(chan struct{}), served: map[[2]int]int{}}
	c.wg.Add(1 + readers)
	go c.write()
	for i := range readers {
		go c.read(uint(i))
	}
	return c
}

func (c *churn) write() {
	defer c.wg.Done()
	for v := int64(1); ; v++ {
		for id := uint(1); id <= c.hot; id++ {
			select {
			case <-c.stop:
				return
			default:
			}
			if err := c.e.db.Model(&Item{}).Where("id = ?", id).Update("version", v).Error; err != nil {
				c.writeFailures.Add(1)
				c.note(fmt.Sprintf("write of item %d version %d failed: %v", id, v, err))
				continue
			}
			c.committed[id].Store(v)
			c.writes.Add(1)
		}
	}
}

func (c *churn) read(seed uint) {
	defer c.wg.Done()
	for n := seed; ; n++ {
		select {
		case <-c.stop:
			return
		default:
		}
		id := n%(c.hot+c.cold) + 1
		phase := c.phase.Load()
		var floor int64
		if id <= c.hot {
			floor = c.committed[id].Load()
		}
		var s served
		err := c.e.db.Model(&Item{}).Select("name, version, "+c.e.c.portExpr()+" AS port").Where("id = ?", id).Scan(&s).Error
		c.reads.Add(1)
		switch {
		case err != nil:
			c.failed.Add(1)
			c.note(fmt.Sprintf("read of item %d failed: %v", id, err))
		case int64(s.Version) < floor:
			c.stale.Add(1)
			c.note(fmt.Sprintf("read of item %d on port %d: version %d, committed %d before the read", id, s.Port, s.Version, floor))
		}
		c.mu.Lock()
		c.served[[2]int{int(phase), s.Port}]++
		c.mu.Unlock()
	}
}

func (c *churn) note(problem string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.problems) < 5 {
		c.problems = append(c.problems, problem)
	}
}

// servedBy is how many reads begun in phase were answered on port.
func (c *churn) servedBy(phase, port int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.served[[2]int{phase, port}]
}

// next starts phase n: reads begun from now on count in it.
func (c *churn) next(n int) { c.phase.Store(int32(n)) }

// waitServed waits up to 15 s until a read begun in phase was answered
// on port.
func (c *churn) waitServed(phase, port int, what string) {
	c.e.t.Helper()
	for deadline := time.Now().Add(15 * time.Second); c.servedBy(phase, port) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			c.e.t.Fatalf("%s: no read answered on port %d within 15 s (reads %d, failed %d, stale %d, problems %v)", what, port, c.reads.Load(), c.failed.Load(), c.stale.Load(), c.problems)
		}
	}
}

func (c *churn) finish() {
	c.stopOnce.Do(func() { close(c.stop) })
	c.wg.Wait()
}

// pluginMetrics gathers p's metrics: each metric name (with its labels,
// "name,label=value") to its value (a histogram's: its count).
func pluginMetrics(t *testing.T, p *plugin.Plugin) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(freshreadprom.Plugin(p)); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[key] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}

// replicaNames is the replicas p has now, sorted (its
// freshread_replica_up series).
func replicaNames(t *testing.T, p *plugin.Plugin) []string {
	var names []string
	for k := range pluginMetrics(t, p) {
		if name, ok := strings.CutPrefix(k, "freshread_replica_up,replica="); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// TestSetReplicasUnderLoad adds and removes real replicas under a read and
// write load, one of them with replay paused when it joins: every answer
// is checked against the versions committed before the read began (0
// stale), no read fails, the new replica serves reads (the never-written
// items it has), and no read begun after a replica's removal returned is
// answered by it.
func TestSetReplicasUnderLoad(t *testing.T) {
	e := newEnv(t, withConfig(func(c *plugin.Config) { c.Replicas = c.Replicas[:1] }))
	r0 := plugin.Replica{Name: "r0", Dialector: e.c.replica(0, e.dbName)}
	r1 := plugin.Replica{Name: "r1", Dialector: e.c.replica(1, e.dbName)}
	p0, p1 := e.c.replicaPort(0), e.c.replicaPort(1)
	e.waitReplicaServes(e.db)
	seedChurn(e, 8)
	e.pause(1)
	ch := startChurn(e, 4, 4, 3)
	defer ch.finish()
	ch.waitServed(0, p0, "r0 before the change")

	// r1 joins behind: the written items are newer on the primary.
	if err := e.plug.SetReplicas(e.ctx(), []plugin.Replica{r0, r1}); err != nil {
		t.Fatal(err)
	}
	ch.next(1)
	ch.waitServed(1, p1, "r1, paused, after it joined")

	// r0 leaves: r1 (still paused) keeps serving what it has.
	if err := e.plug.SetReplicas(e.ctx(), []plugin.Replica{r1}); err != nil {
		t.Fatal(err)
	}
	ch.next(2)
	ch.waitServed(2, p1, "r1 after r0 left")
	time.Sleep(200 * time.Millisecond)

	// r1 replays again; r0 replaces it.
	if err := e.c.resume(e.ctx(), 1); err != nil {
		t.Fatal(err)
	}
	if err := e.plug.SetReplicas(e.ctx(), []plugin.Replica{r0}); err != nil {
		t.Fatal(err)
	}
	ch.next(3)
	ch.waitServed(3, p0, "r0 after it replaced r1")
	time.Sleep(200 * time.Millisecond)
	ch.finish()

	if n := ch.servedBy(2, p0); n != 0 {
		t.Errorf("%d reads begun after r0's removal returned were answered by r0", n)
	}
	if n := ch.servedBy(3, p1); n != 0 {
		t.Errorf("%d reads begun after r1's removal returned were answered by r1", n)
	}
	if ch.stale.Load() != 0 || ch.failed.Load() != 0 || ch.writeFailures.Load() != 0 {
		t.Fatalf("stale reads %d, failed reads %d, failed writes %d of %d reads and %d writes: %v",
			ch.stale.Load(), ch.failed.Load(), ch.writeFailures.Load(), ch.reads.Load(), ch.writes.Load(), ch.problems)
	}
	if ch.writes.Load() < 10 {
		t.Fatalf("only %d writes: the load did not run", ch.writes.Load())
	}
	if got := replicaNames(t, e.plug); !slices.Equal(got, []string{"r0"}) {
		t.Fatalf("replicas at the end: %v, want [r0]", got)
	}
	t.Logf("%d reads (r0 %d, r1 %d), %d writes, 0 stale, 0 failed", ch.reads.Load(),
		ch.servedBy(0, p0)+ch.servedBy(1, p0)+ch.servedBy(3, p0), ch.servedBy(1, p1)+ch.servedBy(2, p1), ch.writes.Load())
}

// TestSetReplicasDrains removes a replica while a slow read runs on it:
// the read finishes there with its full answer, reads begun after the
// removal go elsewhere, and once the slow read is done no connection of
// the plugin to the removed replica is left open.
func TestSetReplicasDrains(t *testing.T) {
	app := fmt.Sprintf("freshread_drain_%d", time.Now().UnixNano())
	e := newEnv(t, withConfig(func(c *plugin.Config) {
		c.Replicas = c.Replicas[:1]
	}))
	u, err := url.Parse(e.pg.ReplicaDSN(0, e.dbName))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	r0DSN := u.String()
	r0 := plugin.Replica{Name: "r0-drained", Dialector: postgres.Open(r0DSN)}
	r1 := plugin.Replica{Name: "r1", Dialector: e.c.replica(1, e.dbName)}
	if err := e.plug.SetReplicas(e.ctx(), []plugin.Replica{r0}); err != nil {
		t.Fatal(err)
	}
	eventual := func() *gorm.DB { return e.db.WithContext(plugin.WithConsistency(e.ctx(), plugin.Eventual)) }
	e.eventuallyReplica(func() served { return e.readOther(eventual()) }, "a read on r0-drained")

	admin, err := sql.Open("pgx", e.pg.ReplicaDSN(0, "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	conns := func(active bool) int {
		q := "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"
		if active {
			q += " AND state = 'active' AND query LIKE '%generate_series%'"
		}
		var n int
		if err := admin.QueryRowContext(e.ctx(), q, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	type slow struct {
		N, Port int
		err     error
	}
	done := make(chan slow, 1)
	go func() {
		var s slow
		s.err = eventual().Raw("SELECT count(*) AS n, inet_server_port() AS port FROM generate_series(1, 20000000)").Scan(&s).Error
		done <- s
	}()
	for deadline := time.Now().Add(10 * time.Second); conns(true) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slow read never ran on r0-drained")
		}
	}
	if err := e.plug.SetReplicas(e.ctx(), []plugin.Replica{r1}); err != nil {
		t.Fatal(err)
	}
	if got := e.readOther(eventual()); got.Port == e.c.replicaPort(0) {
		t.Errorf("a read begun after the removal was answered by the removed replica (port %d)", got.Port)
	}
	s := <-done
	if s.err != nil || s.N != 20000000 || s.Port != e.c.replicaPort(0) {
		t.Fatalf("slow read: n %d on port %d, err %v; want 20000000 on r0-drained's port %d, no error", s.N, s.Port, s.err, e.c.replicaPort(0))
	}
	for deadline := time.Now().Add(10 * time.Second); conns(false) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections to the removed replica still open 10 s after its last read ended", conns(false))
		}
	}
}

// TestSetReplicasRefused: a bad list changes nothing: a duplicate name, a
// primary given as a replica (ErrNotReplica), a dialector of another
// kind, a replica without name or dialector; and SetReplicas is refused
// before db.Use and after Close.
func TestSetReplicasRefused(t *testing.T) {
	e := newEnv(t)
	r0 := plugin.Replica{Name: "r0", Dialector: e.c.replica(0, e.dbName)}
	for what, c := range map[string]struct {
		list []plugin.Replica
		want error
	}{
		"duplicate name":     {[]plugin.Replica{r0, r0}, plugin.ErrConfig},
		"primary":            {[]plugin.Replica{r0, {Name: "p", Dialector: e.c.primary(e.dbName)}}, plugin.ErrNotReplica},
		"other dialect":      {[]plugin.Replica{{Name: "m", Dialector: mysql.Open("app@tcp(127.0.0.1:1)/app")}}, plugin.ErrConfig},
		"nameless replica":   {[]plugin.Replica{{Dialector: e.c.replica(1, e.dbName)}}, plugin.ErrConfig},
		"replica without DB": {[]plugin.Replica{{Name: "x"}}, plugin.ErrConfig},
	} {
		err := e.plug.SetReplicas(e.ctx(), c.list)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", what, err, c.want)
		}
		if got := replicaNames(t, e.plug); !slices.Equal(got, []string{"r0", "r1"}) {
			t.Fatalf("%s: replicas after the refusal %v, want [r0 r1] unchanged", what, got)
		}
	}
	e.waitReplicaServes(e.db)
	if err := plugin.New(plugin.Config{}).SetReplicas(e.ctx(), []plugin.Replica{r0}); !errors.Is(err, plugin.ErrNotInstalled) {
		t.Fatalf("SetReplicas before db.Use: %v, want ErrNotInstalled", err)
	}
	p := e.plug
	p.Close()
	if err := p.SetReplicas(e.ctx(), []plugin.Replica{r0}); !errors.Is(err, plugin.ErrClosed) {
		t.Fatalf("SetReplicas after Close: %v, want ErrClosed", err)
	}
}

// TestSetReplicasMariaDB adds MariaDB's replica with its SQL thread
// stopped, then removes it: a read of a row written before the stop may
// go to it, a read of one written after goes to the primary (checked on
// the data), and after the removal every read goes to the primary.
func TestSetReplicasMariaDB(t *testing.T) {
	e := newMariaEnv(t, withConfig(func(c *plugin.Config) { c.Replicas = nil }))
	if err := e.db.Create(&Item{ID: 1, Name: "before"}).Error; err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp()
	e.pause(0)
	if err := e.db.Model(&Item{}).Where("id = ?", 1).Updates(map[string]any{"name": "after", "version": 2}).Error; err != nil {
		t.Fatal(err)
	}
	r0 := plugin.Replica{Name: "r0", Dialector: e.c.replica(0, e.dbName)}
	if err := e.plug.SetReplicas(e.ctx(), []plugin.Replica{r0}); err != nil {
		t.Fatal(err)
	}
	e.eventuallyReplica(func() served { return e.readOther(e.db) }, "the untouched table on the added replica")
	for range 20 {
		if got := e.readItem(e.db, 1); got.Name != "after" || got.Version != 2 || got.Port != e.c.primaryPort() {
			t.Fatalf("item 1 written after the stop: %+v, want version 2 from the primary (port %d)", got, e.c.primaryPort())
		}
	}
	if err := e.plug.SetReplicas(e.ctx(), nil); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if got := e.readOther(e.db); got.Port != e.c.primaryPort() {
			t.Fatalf("read after the removal answered on port %d, want the primary's %d", got.Port, e.c.primaryPort())
		}
	}
}

// TestDiscoveryUnderLoad finds the replicas through SRV records of an
// in-process DNS server whose answers change under a read and write load:
// the replicas follow the answers (one joining with replay paused), a
// failing server or an answer without records keeps them, and no read is
// stale or fails.
func TestDiscoveryUnderLoad(t *testing.T) {
	ns := dnstest.Start(t)
	const name = "_postgresql._tcp.replicas.freshread.test"
	var dsn atomic.Pointer[url.URL] // the replica URL of the test's database
	open := func(host string, port int) gorm.Dialector {
		u := *dsn.Load()
		u.Host = net.JoinHostPort(host, strconv.Itoa(port))
		return postgres.Open(u.String())
	}
	e := newEnv(t, withConfig(func(c *plugin.Config) {
		c.Replicas = nil
		c.Discovery = &plugin.DNSDiscovery{Name: name, Record: plugin.RecordSRV, Nameserver: ns.Addr(), Interval: 50 * time.Millisecond, Dialector: open}
	}))
	// No record yet: the first lookups failed and the replicas are none.
	if got := replicaNames(t, e.plug); len(got) != 0 {
		t.Fatalf("replicas before any record: %v", got)
	}
	u, err := url.Parse(e.pg.ReplicaDSN(0, e.dbName))
	if err != nil {
		t.Fatal(err)
	}
	dsn.Store(u)
	host := e.pg.Host()
	if ip := net.ParseIP(host); ip == nil {
		ips, err := net.LookupIP(host)
		if err != nil || len(ips) == 0 {
			t.Fatalf("resolve %s: %v", host, err)
		}
		host = ips[0].String()
	}
	ns.SetA("r0.freshread.test", host)
	ns.SetA("r1.freshread.test", host)
	p0, p1 := e.c.replicaPort(0), e.c.replicaPort(1)
	n0, n1 := net.JoinHostPort(host, strconv.Itoa(p0)), net.JoinHostPort(host, strconv.Itoa(p1))
	waitReplicas := func(want ...string) {
		t.Helper()
		slices.Sort(want)
		for deadline := time.Now().Add(15 * time.Second); !slices.Equal(replicaNames(t, e.plug), want); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("replicas %v, want %v within 15 s", replicaNames(t, e.plug), want)
			}
		}
	}
	ns.SetSRV(name, dnstest.SRV{Target: "r0.freshread.test", Port: uint16(p0)})
	waitReplicas(n0)

	seedChurn(e, 8)
	e.pause(1)
	ch := startChurn(e, 4, 4, 3)
	defer ch.finish()
	ch.waitServed(0, p0, "r0, discovered")

	ns.SetSRV(name, dnstest.SRV{Target: "r0.freshread.test", Port: uint16(p0)}, dnstest.SRV{Target: "r1.freshread.test", Port: uint16(p1)})
	waitReplicas(n0, n1)
	ch.next(1)
	ch.waitServed(1, p1, "r1, paused, discovered")

	ns.SetSRV(name, dnstest.SRV{Target: "r1.freshread.test", Port: uint16(p1)})
	waitReplicas(n1)
	ch.next(2)
	ch.waitServed(2, p1, "r1 after r0 left the records")

	// Failures keep the replicas: a failing server, then no records.
	failures := pluginMetrics(t, e.plug)["freshread_discovery_failures_total"]
	ns.Fail(true)
	for deadline := time.Now().Add(15 * time.Second); pluginMetrics(t, e.plug)["freshread_discovery_failures_total"] < failures+2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no discovery failure counted within 15 s of SERVFAIL answers")
		}
	}
	ns.Fail(false)
	ns.SetSRV(name)
	failures = pluginMetrics(t, e.plug)["freshread_discovery_failures_total"]
	for deadline := time.Now().Add(15 * time.Second); pluginMetrics(t, e.plug)["freshread_discovery_failures_total"] < failures+2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no discovery failure counted within 15 s of answers without records")
		}
	}
	waitReplicas(n1)
	ch.waitServed(2, p1, "r1 while discovery fails")
	ch.finish()

	if n := ch.servedBy(2, p0); n != 0 {
		t.Errorf("%d reads begun after r0 left the replicas were answered by r0", n)
	}
	if ch.stale.Load() != 0 || ch.failed.Load() != 0 || ch.writeFailures.Load() != 0 {
		t.Fatalf("stale reads %d, failed reads %d, failed writes %d of %d reads and %d writes: %v",
			ch.stale.Load(), ch.failed.Load(), ch.writeFailures.Load(), ch.reads.Load(), ch.writes.Load(), ch.problems)
	}
	if err := e.plug.SetReplicas(e.ctx(), nil); !errors.Is(err, plugin.ErrConfig) {
		t.Fatalf("SetReplicas with discovery on: %v, want ErrConfig", err)
	}
	t.Logf("%d reads, %d writes, 0 stale, 0 failed; %d DNS questions", ch.reads.Load(), ch.writes.Load(), ns.Asked())
}
