package plugin

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// identityConnector opens connections that each answer any query with one
// row: the identity of the server the connection reached, taken in turn
// from ids (what a load balancer alternating over servers does).
type identityConnector struct {
	mu   *sync.Mutex
	next *int
	ids  *[]string
}

func newIdentityConnector(ids ...string) identityConnector {
	return identityConnector{mu: new(sync.Mutex), next: new(int), ids: &ids}
}

// route makes the connections opened from now on reach ids in turn.
func (c identityConnector) route(ids ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	*c.ids, *c.next = ids, 0
}

func (c identityConnector) Connect(context.Context) (driver.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := (*c.ids)[*c.next%len(*c.ids)]
	*c.next++
	return identityConn(id), nil
}

func (identityConnector) Driver() driver.Driver { return nil }

type identityConn string

func (identityConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("no") }
func (identityConn) Close() error                        { return nil }
func (identityConn) Begin() (driver.Tx, error)           { return nil, errors.New("no") }
func (c identityConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	return &identityRows{id: string(c)}, nil
}

type identityRows struct {
	id   string
	done bool
}

func (*identityRows) Columns() []string { return []string{"id"} }
func (*identityRows) Close() error      { return nil }
func (r *identityRows) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done, dest[0] = true, r.id
	return nil
}

var readFake = serverIdentity("id")

func newFakeEndpoint(name string) *endpoint {
	return &endpoint{name: name, read: readFake, log: slog.New(slog.DiscardHandler)}
}

func TestSameServer(t *testing.T) {
	if id, err := sameServer("r0", []string{"a", "a", "a"}); err != nil || id != "a" {
		t.Fatalf("three connections to one server: %q, %v", id, err)
	}
	_, err := sameServer("r0", []string{"a", "b", "a"})
	if !errors.Is(err, ErrSeveralServers) {
		t.Fatalf("two servers: %v, want ErrSeveralServers", err)
	}
	for _, want := range []string{`"r0"`, "2 servers", "a; b", "its own Replica"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestEndpointVerifyBalancer: connections held at once through a balancer
// that alternates over two servers are refused; through one server they
// are accepted; with MaxOpenConns 1 the one connection is all there is.
func TestEndpointVerifyBalancer(t *testing.T) {
	ctx := context.Background()
	db := sql.OpenDB(newIdentityConnector("s0", "s1"))
	defer db.Close()
	if err := newFakeEndpoint("r0").verify(ctx, db); !errors.Is(err, ErrSeveralServers) {
		t.Fatalf("alternating balancer: %v, want ErrSeveralServers", err)
	}

	one := sql.OpenDB(newIdentityConnector("s0"))
	defer one.Close()
	e := newFakeEndpoint("r0")
	if err := e.verify(ctx, one); err != nil || e.id != "s0" {
		t.Fatalf("one server: id %q, %v", e.id, err)
	}

	single := sql.OpenDB(newIdentityConnector("s0", "s1"))
	defer single.Close()
	single.SetMaxOpenConns(1)
	if err := newFakeEndpoint("r0").verify(ctx, single); err != nil {
		t.Fatalf("MaxOpenConns 1 (reads and polls share one connection): %v", err)
	}
}

// TestEndpointPollCheck: a poll that reads the verified identity passes; one
// that reads another makes the replica down until its connections agree
// again, verified at most once per endpointRecheck.
func TestEndpointPollCheck(t *testing.T) {
	ctx := context.Background()
	conn := newIdentityConnector("s0")
	db := sql.OpenDB(conn)
	defer db.Close()
	e := newFakeEndpoint("r0")
	if err := e.verify(ctx, db); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(endpointRecheck) // past the verification's recheck
	if err := e.check(ctx, db, "s0", now); err != nil {
		t.Fatalf("same server: %v", err)
	}

	// The DSN now alternates: the pool's idle connections still reach s0,
	// so close them.
	conn.route("s1", "s0")
	db.SetMaxIdleConns(-1)
	db.SetMaxIdleConns(2)
	err := e.check(ctx, db, "s1", now)
	if !errors.Is(err, ErrSeveralServers) {
		t.Fatalf("poll on another server, connections disagreeing: %v, want ErrSeveralServers", err)
	}
	// A poll that reaches the server verified before passes no more:
	// other connections of the pool reach another.
	if err := e.check(ctx, db, "s0", now.Add(time.Millisecond)); err == nil {
		t.Fatal("a poll on s0 passed after connections were found on two servers")
	}
	// Within endpointRecheck: the same refusal without asking the server.
	conn.route("s1")
	if err := e.check(ctx, db, "s1", now.Add(endpointRecheck/2)); !errors.Is(err, ErrSeveralServers) {
		t.Fatalf("before the recheck: %v", err)
	}
	// Later, every connection reaches s1 (a replaced server): adopted.
	db.SetMaxIdleConns(-1)
	db.SetMaxIdleConns(2)
	if err := e.check(ctx, db, "s1", now.Add(endpointRecheck)); err != nil {
		t.Fatalf("every connection on s1: %v", err)
	}
	if e.id != "s1" {
		t.Fatalf("verified identity %q, want s1", e.id)
	}
	if err := e.check(ctx, db, "s0", now.Add(endpointRecheck+time.Millisecond)); err == nil || !strings.Contains(err.Error(), "not the verified") {
		t.Fatalf("a poll on s0 right after a verification: %v", err)
	}
}

// TestEndpointRegistry: checkEndpoint finds the endpoint of a watched
// pool, and passes pools that are not watched.
func TestEndpointRegistry(t *testing.T) {
	ctx := context.Background()
	db := sql.OpenDB(newIdentityConnector("s0"))
	defer db.Close()
	if err := checkEndpoint(ctx, db, "anything"); err != nil {
		t.Fatalf("an unwatched pool: %v", err)
	}
	e := newFakeEndpoint("r0")
	watchEndpoint(db, e)
	// Never verified (the replica was down at start): the first poll
	// verifies it.
	if err := checkEndpoint(ctx, db, "s0"); err != nil || e.id != "s0" {
		t.Fatalf("first poll: id %q, %v", e.id, err)
	}
	if err := checkEndpoint(ctx, db, "s9"); err == nil {
		t.Fatal("a poll on another server passed")
	}
}
