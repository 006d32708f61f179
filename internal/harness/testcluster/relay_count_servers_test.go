package testcluster_test

import (
	"net/url"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// The counting relays against real servers and drivers: every statement a
// client runs is counted once, whichever protocol path the driver takes.
func TestCountingRelayPostgres(t *testing.T) {
	pg := testcluster.PostgresFor(t)
	u, err := url.Parse(pg.PrimaryDSN(""))
	if err != nil {
		t.Fatal(err)
	}
	r, err := testcluster.NewCountingRelay(u.Host, testcluster.PostgresProtocol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	u.Host = r.Addr()
	db := open(t, "pgx", u.String())
	ctx := ctxT(t)
	conn, err := db.Conn(ctx) // connected: the startup is not a query
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	before := r.Counts()
	var n int
	for i := range 3 { // extended protocol: prepared, then cached
		if err := conn.QueryRowContext(ctx, "SELECT $1::int", i).Scan(&n); err != nil || n != i {
			t.Fatalf("SELECT %d: %d, %v", i, n, err)
		}
	}
	if _, err := conn.ExecContext(ctx, "SELECT 1; SELECT 2"); err != nil { // simple protocol
		t.Fatal(err)
	}
	d := r.Counts().Sub(before)
	if d.Queries != 4 || d.Messages['E'] != 3 || d.Messages['Q'] != 1 || d.Opaque != 0 {
		t.Fatalf("counted %+v, want 4 queries: 3 executes, 1 simple query, none opaque", d)
	}
	if c := r.Counts(); c.Conns != 1 {
		t.Fatalf("%d connections counted, want 1", c.Conns)
	}
}

func TestCountingRelayMariaDB(t *testing.T) {
	m := testcluster.MariaDBFor(t)
	cfg, err := mysql.ParseDSN(m.PrimaryDSN(""))
	if err != nil {
		t.Fatal(err)
	}
	r, err := testcluster.NewCountingRelay(cfg.Addr, testcluster.MySQLProtocol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	cfg.Addr = r.Addr()
	db := open(t, "mysql", cfg.FormatDSN())
	ctx := ctxT(t)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	before := r.Counts()
	var n int
	for i := range 3 { // with an argument: prepare, execute, close
		if err := conn.QueryRowContext(ctx, "SELECT ?", i).Scan(&n); err != nil || n != i {
			t.Fatalf("SELECT %d: %d, %v", i, n, err)
		}
	}
	if err := conn.QueryRowContext(ctx, "SELECT 7").Scan(&n); err != nil || n != 7 { // COM_QUERY
		t.Fatalf("SELECT 7: %d, %v", n, err)
	}
	d := r.Counts().Sub(before)
	if d.Queries != 4 || d.Messages[0x17] != 3 || d.Messages[0x03] != 1 || d.Messages[0x16] != 3 {
		t.Fatalf("counted %+v, want 4 queries: 3 COM_STMT_EXECUTE (after 3 COM_STMT_PREPARE), 1 COM_QUERY", d)
	}
}
