package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

func TestLookupUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := dispatch([]string{"lookup"}, nil, &out, &errb); code != 2 {
		t.Fatalf("no subcommand: exit %d", code)
	}
	if code := dispatch([]string{"lookup", "backfill"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--lookup") {
		t.Fatalf("missing flags: exit %d, %q", code, errb.String())
	}
	if code := dispatch([]string{"lookup", "backfill", "--shard", "nodsn"}, nil, &out, &errb); code != 2 {
		t.Fatalf("bad --shard: exit %d", code)
	}
}

func TestLookupBackfillCommand(t *testing.T) {
	pg := testcluster.PostgresFor(t)
	quiet := &gorm.Config{Logger: logger.Discard}
	lookupDB := pg.CreateDatabase(t)
	args := []string{"lookup", "backfill", "--lookup", pg.PrimaryDSN(lookupDB), "--chunk", "7"}
	for i := 0; i < 2; i++ {
		name := pg.CreateDatabase(t)
		db, err := gorm.Open(postgres.Open(pg.PrimaryDSN(name)), quiet)
		if err != nil {
			t.Fatal(err)
		}
		db.Exec("CREATE TABLE orders (id bigint PRIMARY KEY, user_id bigint)")
		for j := 1; j <= 20; j++ {
			db.Exec("INSERT INTO orders VALUES (?, ?)", i*100+j, (i*100+j)*3)
		}
		closeGorm(db)
		args = append(args, "--shard", fmt.Sprintf("s%d=%s", i, pg.PrimaryDSN(name)))
	}
	var out, errb bytes.Buffer
	if code := dispatch(args, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "backfill complete: 40 pairs") || !strings.Contains(out.String(), "s1/orders: 20 rows") {
		t.Fatalf("output: %s", out.String())
	}
	// A second run resumes: nothing left to do.
	out.Reset()
	if code := dispatch(args, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "done earlier") {
		t.Fatalf("second run: exit %d, %s", code, out.String())
	}
	ldb, _ := gorm.Open(postgres.Open(pg.PrimaryDSN(lookupDB)), quiet)
	defer closeGorm(ldb)
	var n int64
	ldb.Table("order_lookup").Where("user_id = order_id * 3").Count(&n)
	if n != 40 {
		t.Fatalf("%d lookup rows, want 40", n)
	}
	_ = context.Background()
}
