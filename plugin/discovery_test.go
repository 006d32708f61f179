package plugin

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/dnstest"
)

func pgAt(host string, port int) gorm.Dialector {
	return postgres.Open("host=" + host + " port=" + strconv.Itoa(port) + " dbname=app")
}

func addrs(hps []hostPort) []string {
	var out []string
	for _, a := range hps {
		out = append(out, a.String())
	}
	return out
}

// TestDiscoveryLookup resolves A and SRV records from an in-process DNS
// server whose answers change, and fails on SERVFAIL, on an unknown name
// and on an answer without addresses (the replicas are kept then).
func TestDiscoveryLookup(t *testing.T) {
	ns := dnstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	a := (&DNSDiscovery{Name: "replicas.test", Port: 5433, Nameserver: ns.Addr(), Dialector: pgAt}).withDefaults()
	ns.SetA("replicas.test", "10.0.0.2", "10.0.0.1", "10.0.0.2")
	got, err := a.lookup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.0.0.1:5433", "10.0.0.2:5433"}; !slices.Equal(addrs(got), want) {
		t.Fatalf("A lookup: %v, want %v (sorted, without duplicates)", addrs(got), want)
	}
	ns.SetA("replicas.test", "10.0.0.3")
	if got, err = a.lookup(ctx); err != nil || !slices.Equal(addrs(got), []string{"10.0.0.3:5433"}) {
		t.Fatalf("A lookup after the change: %v, %v", addrs(got), err)
	}

	srv := (&DNSDiscovery{Name: "_pg._tcp.replicas.test", Record: RecordSRV, Nameserver: ns.Addr(), Dialector: pgAt}).withDefaults()
	ns.SetSRV("_pg._tcp.replicas.test", dnstest.SRV{Target: "db1.test", Port: 6001}, dnstest.SRV{Target: "db2.test", Port: 6002})
	ns.SetA("db1.test", "10.0.1.1")
	ns.SetA("db2.test", "10.0.1.2")
	if got, err = srv.lookup(ctx); err != nil || !slices.Equal(addrs(got), []string{"10.0.1.1:6001", "10.0.1.2:6002"}) {
		t.Fatalf("SRV lookup: %v, %v", addrs(got), err)
	}
	// A target that does not resolve fails the whole answer: a partial one
	// would remove a replica that is there.
	ns.SetSRV("_pg._tcp.replicas.test", dnstest.SRV{Target: "db1.test", Port: 6001}, dnstest.SRV{Target: "gone.test", Port: 6003})
	if got, err = srv.lookup(ctx); err == nil || !strings.Contains(err.Error(), "gone.test") {
		t.Fatalf("SRV lookup with an unresolvable target: %v, %v; want an error naming it", addrs(got), err)
	}

	ns.Fail(true)
	if got, err = a.lookup(ctx); err == nil {
		t.Fatalf("lookup on SERVFAIL: %v, want an error", addrs(got))
	}
	ns.Fail(false)
	ns.SetA("replicas.test")
	if got, err = a.lookup(ctx); err == nil {
		t.Fatalf("lookup without addresses: %v, want an error", addrs(got))
	}
	nx := (&DNSDiscovery{Name: "missing.test", Port: 1, Nameserver: ns.Addr(), Dialector: pgAt}).withDefaults()
	if got, err = nx.lookup(ctx); err == nil {
		t.Fatalf("lookup of an unknown name: %v, want an error", addrs(got))
	}
	if ns.Asked() == 0 {
		t.Fatal("the in-process server was never asked: the lookups went elsewhere")
	}
}

// TestDiscoveryValidate: each bad field is refused with ErrConfig, naming
// it; the defaults are documented ones.
func TestDiscoveryValidate(t *testing.T) {
	good := DNSDiscovery{Name: "replicas.test", Port: 5432, Dialector: pgAt}
	if err := good.validate(); err != nil {
		t.Fatal(err)
	}
	d := good.withDefaults()
	if d.Interval != time.Minute || d.Timeout != 10*time.Second {
		t.Fatalf("defaults: Interval %v, Timeout %v; want 1m, 10s", d.Interval, d.Timeout)
	}
	for field, bad := range map[string]DNSDiscovery{
		"Name":       {Port: 5432, Dialector: pgAt},
		"Port":       {Name: "x", Dialector: pgAt},
		"Record":     {Name: "x", Record: 7, Port: 1, Dialector: pgAt},
		"Dialector":  {Name: "x", Port: 1},
		"Nameserver": {Name: "x", Port: 1, Dialector: pgAt, Nameserver: "10.0.0.1"},
	} {
		err := bad.validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "Discovery."+field) {
			t.Errorf("%s: %v, want ErrConfig naming Discovery.%s", field, err, field)
		}
	}
	srv := DNSDiscovery{Name: "x", Record: RecordSRV, Dialector: pgAt}
	if err := srv.validate(); err != nil {
		t.Fatalf("SRV without Port: %v, want accepted (SRV records carry ports)", err)
	}
}

// TestReplicaTargets: a replica named again with the same DSN and pool is
// the same target (kept open by SetReplicas); another DSN, pool or
// dialector kind is not.
func TestReplicaTargets(t *testing.T) {
	dsn := "host=10.0.0.1 port=5432 dbname=app"
	a := targetOf(Replica{Name: "r", Dialector: postgres.Open(dsn)}, Pool{})
	for what, c := range map[string]struct {
		rc   Replica
		def  Pool
		same bool
	}{
		"same DSN":                {Replica{Name: "r", Dialector: postgres.Open(dsn)}, Pool{}, true},
		"other DSN":               {Replica{Name: "r", Dialector: postgres.Open(dsn + " user=x")}, Pool{}, false},
		"other pool":              {Replica{Name: "r", Dialector: postgres.Open(dsn), Pool: Pool{MaxOpenConns: 3}}, Pool{}, false},
		"other shared pool":       {Replica{Name: "r", Dialector: postgres.Open(dsn)}, Pool{MaxIdleConns: 4}, false},
		"simple protocol":         {Replica{Name: "r", Dialector: postgres.New(postgres.Config{DSN: dsn, PreferSimpleProtocol: true})}, Pool{}, false},
		"same DSN through New":    {Replica{Name: "r", Dialector: postgres.New(postgres.Config{DSN: dsn})}, Pool{}, true},
		"a connection, not a DSN": {Replica{Name: "r", Dialector: postgres.New(postgres.Config{Conn: &gorm.PreparedStmtDB{}})}, Pool{}, false},
	} {
		if got := targetsEqual(a, targetOf(c.rc, c.def)); got != c.same {
			t.Errorf("%s: same target %v, want %v", what, got, c.same)
		}
	}
	conn := postgres.New(postgres.Config{Conn: &gorm.PreparedStmtDB{}})
	if !targetsEqual(targetOf(Replica{Dialector: conn}, Pool{}), targetOf(Replica{Dialector: conn}, Pool{})) {
		t.Error("the same dialector value (no DSN): want the same target")
	}
}
