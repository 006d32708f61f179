package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	gormmysql "gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

func TestShardUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := dispatch([]string{"shard"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "plan") {
		t.Fatalf("no action: exit %d, %q", code, errb.String())
	}
	if code := dispatch([]string{"shard", "status"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--map is required") {
		t.Fatalf("no --map: exit %d, %q", code, errb.String())
	}
	for _, bad := range []string{"12-3", "x", ""} {
		if _, err := parseBuckets(bad); err == nil {
			t.Errorf("parseBuckets(%q): no error", bad)
		}
	}
	bs, err := parseBuckets("0-3,8")
	if err != nil || fmt.Sprint(bs) != "[0 1 2 3 8]" {
		t.Fatalf("parseBuckets: %v %v", bs, err)
	}
}

// TestShardEngine: the engine of a --shard DSN, by --engine or by its
// form.
func TestShardEngine(t *testing.T) {
	for _, c := range []struct{ engine, dsn, want string }{
		{"auto", "postgres://u:secret@h:5432/shop?sslmode=disable", enginePostgres},
		{"auto", "postgresql://h/shop", enginePostgres},
		{"auto", "host=h dbname=shop user=u", enginePostgres},
		{"", "host=/var/run/postgresql dbname=shop", enginePostgres},
		{"auto", "u:secret@tcp(h:3306)/shop?parseTime=true", engineMariaDB},
		{"auto", "u@unix(/run/mysqld/mysqld.sock)/shop", engineMariaDB},
		{"mariadb", "u:secret@tcp(h:3306)/shop", engineMariaDB},
		{"MySQL", "u:secret@tcp(h:3306)/shop", engineMariaDB},
		{"postgres", "postgres://h/shop", enginePostgres},
		{"auto", "mysql://u@h/shop", ""},
		{"mariadb", "postgres://h:5432/shop", ""},
		{"oracle", "u:secret@tcp(h:3306)/shop", ""},
	} {
		got, err := shardEngine(c.engine, c.dsn)
		if got != c.want || (err != nil) != (c.want == "") {
			t.Errorf("shardEngine(%q, %q) = %q, %v; want %q", c.engine, c.dsn, got, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the error prints the DSN: %v", err)
		}
	}
}

// TestShardCommands: init, plan, status, then a move of two buckets with
// rows between two shard databases, verify, cleanup; the rows end on the
// target, the source keeps only its own buckets, and a second move run is
// a no-op (resumed: already switched).
func TestShardCommands(t *testing.T) { testShardCommands(t, enginePostgres) }

// TestMariaDBShardCommands is TestShardCommands with MariaDB shards (the
// map stays in PostgreSQL): the engine is told by the DSNs, and given
// with --engine to the cleanup.
func TestMariaDBShardCommands(t *testing.T) { testShardCommands(t, engineMariaDB) }

func testShardCommands(t *testing.T, engine string) {
	pg := testcluster.PostgresFor(t)
	quiet := &gorm.Config{Logger: logger.Discard}
	mapURL := pg.PrimaryDSN(pg.CreateDatabase(t))
	// shardDB creates a shard database and returns its DSN and GORM
	// handle.
	shardDB := func() (string, *gorm.DB) {
		t.Helper()
		var dsn string
		var d gorm.Dialector
		if engine == engineMariaDB {
			m := testcluster.MariaDBFor(t)
			dsn = m.PrimaryDSN(m.CreateDatabase(t))
			d = gormmysql.Open(dsn)
		} else {
			dsn = pg.PrimaryDSN(pg.CreateDatabase(t))
			d = postgres.Open(dsn)
		}
		db, err := gorm.Open(d, quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeGorm(db) })
		return dsn, db
	}
	run := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := dispatch(append([]string{"shard", args[0], "--map", mapURL}, args[1:]...), nil, &out, &errb); code != want {
			t.Fatalf("shard %v: exit %d (want %d): %s %s", args, code, want, errb.String(), out.String())
		}
		if strings.Contains(out.String()+errb.String(), "password") {
			t.Fatalf("a URL leaked: %s %s", out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	out := run(0, "init", "--buckets", "8", "--shards", "s0,s1")
	if !strings.Contains(out, "s0: 0-3 (4 buckets)") || !strings.Contains(out, "s1: 4-7") {
		t.Fatalf("init: %s", out)
	}
	run(1, "init", "--buckets", "8", "--shards", "s0,s1")
	out = run(0, "plan", "--to", "4")
	if !strings.Contains(out, "--from s0 --to s2 --buckets 2-3") || !strings.Contains(out, "--from s1 --to s3 --buckets 6-7") {
		t.Fatalf("plan: %s", out)
	}
	var shardArgs []string
	dbs := map[string]*gorm.DB{}
	for _, n := range []string{"s0", "s1", "s2", "s3"} {
		dsn, db := shardDB()
		if err := db.Exec("CREATE TABLE orders (id bigint PRIMARY KEY, user_id bigint NOT NULL, note text, amount numeric(12,2))").Error; err != nil {
			t.Fatal(err)
		}
		dbs[n] = db
		shardArgs = append(shardArgs, "--shard", n+"="+dsn)
	}
	// Users 0..79 on their owner by the map (bucket = user mod 8).
	for u := 0; u < 80; u++ {
		owner := "s0"
		if u%8 >= 4 {
			owner = "s1"
		}
		dbs[owner].Exec("INSERT INTO orders VALUES (?, ?, ?, ?)", 1000+u, u, fmt.Sprintf("o'%d", u), float64(u)+0.25)
	}
	move := append([]string{"--from", "s0", "--to", "s2", "--buckets", "2-3", "--table", "orders:user_id"}, shardArgs...)
	out = run(0, append([]string{"move"}, move...)...)
	// Version 2 announced the move before the copy, version 3 switched it.
	if !strings.Contains(out, "copied 20 rows") || !strings.Contains(out, "switched s0-s2-2-3: map version 3") {
		t.Fatalf("move: %s", out)
	}
	out = run(0, "status")
	if !strings.Contains(out, "map version 3") || !strings.Contains(out, "s2: 2-3") {
		t.Fatalf("status: %s", out)
	}
	// The switch verified (counts and checksums with writes held); a
	// standalone verify is for before the switch and says so after it.
	out = run(1, append([]string{"verify"}, move...)...)
	if !strings.Contains(out, "before the switch") {
		t.Fatalf("verify after the switch: %s", out)
	}
	out = run(0, append([]string{"move"}, move...)...)
	if !strings.Contains(out, "map version 3") {
		t.Fatalf("second move run: %s", out)
	}
	cleanup := append([]string{"cleanup"}, move...)
	if engine == engineMariaDB {
		cleanup = append(cleanup, "--engine", "mariadb")
	}
	out = run(0, cleanup...)
	if !strings.Contains(out, "20 rows deleted from s0") {
		t.Fatalf("cleanup: %s", out)
	}
	count := func(n, where string) int64 {
		var c int64
		dbs[n].Raw("SELECT count(*) FROM orders WHERE " + where).Scan(&c)
		return c
	}
	if a, b, c := count("s0", "user_id % 8 IN (2,3)"), count("s2", "user_id % 8 IN (2,3)"), count("s0", "true"); a != 0 || b != 20 || c != 20 {
		t.Fatalf("after the move: s0 has %d moved rows (want 0), s2 %d (want 20), s0 %d in all (want 20)", a, b, c)
	}
	var note string
	var amount float64
	dbs["s2"].Raw("SELECT note, amount FROM orders WHERE id = 1002").Row().Scan(&note, &amount)
	if note != "o'2" || amount != 2.25 {
		t.Fatalf("copied row: %q %v", note, amount)
	}
	// The source refuses writes of the buckets it gave away.
	if err := dbs["s0"].Exec("INSERT INTO orders VALUES (5000, 2, 'late', 1)").Error; err == nil || !strings.Contains(err.Error(), "FRB01") {
		t.Fatalf("write to a moved bucket on the source: %v", err)
	}
}
