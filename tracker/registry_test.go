package tracker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/internal/testcluster"
)

func TestEntryValidate(t *testing.T) {
	ok := Entry{Host: "db.internal", Port: 5432, Database: "app", Replicas: []ReplicaEntry{{Name: "r0"}, {Name: "r1", Host: "10.0.0.2", Port: 5432}}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, e := range map[string]Entry{
		"user:pw@host":      {Host: "u:pw@db", Port: 5432, Database: "app"},
		"url as host":       {Host: "postgres://u:pw@db", Port: 5432, Database: "app"},
		"dsn as database":   {Host: "db", Port: 5432, Database: "app password=x"},
		"no port":           {Host: "db", Database: "app"},
		"duplicate replica": {Host: "db", Port: 1, Database: "app", Replicas: []ReplicaEntry{{Name: "r"}, {Name: "r"}}},
		"reserved replica":  {Host: "db", Port: 1, Database: "app", Replicas: []ReplicaEntry{{Name: "primary"}}},
		"half address":      {Host: "db", Port: 1, Database: "app", Replicas: []ReplicaEntry{{Name: "r", Host: "x"}}},
	} {
		if err := e.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "pw") {
			t.Errorf("%s: the error repeats the secret: %v", name, err)
		}
	}
}

func TestRegistryRoundTrip(t *testing.T) {
	rs := testcluster.RedisFor(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	prefix := "regtest:"
	rdb.Del(ctx, prefix+RegistryKey)
	e := Entry{Host: "h", Port: 5432, Database: "d", Replicas: []ReplicaEntry{{Name: "b"}, {Name: "a"}}}
	for i := 0; i < 2; i++ {
		if err := Announce(ctx, rdb, prefix, e); err != nil {
			t.Fatal(err)
		}
	}
	// Same database, another replica list: merged.
	if err := Announce(ctx, rdb, prefix, Entry{Host: "h", Port: 5432, Database: "d", Replicas: []ReplicaEntry{{Name: "c"}}}); err != nil {
		t.Fatal(err)
	}
	rdb.SAdd(ctx, prefix+RegistryKey, `{"host":"x","port":1,"database":"y","password":"hunter2"}`, "not json")
	got, bad, err := Entries(ctx, rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || bad != 1 {
		t.Fatalf("entries %+v, bad %d", got, bad)
	}
	for _, g := range got {
		if g.ID() == "h:5432/d" && len(g.Replicas) != 3 {
			t.Fatalf("replicas not merged: %+v", g)
		}
	}
	if err := Withdraw(ctx, rdb, prefix, e); err != nil {
		t.Fatal(err)
	}
}

func TestRedaction(t *testing.T) {
	s := &secrets{}
	s.add(passwordOf("postgres://u:Very-Secret-1@h:5432/d"))
	s.add(passwordOf("host=h user=u password=Other-Secret-2 dbname=d"))
	var buf bytes.Buffer
	log := slog.New(redactHandler{inner: slog.NewJSONHandler(&buf, nil), s: s})
	base := errors.New("dial postgres://u:Very-Secret-1@h failed")
	log.With("dsn", "password=Other-Secret-2").Warn("failed Very-Secret-1", "err", base, "group", slog.GroupValue(slog.String("x", "Other-Secret-2")))
	if out := buf.String(); strings.Contains(out, "Secret-1") || strings.Contains(out, "Secret-2") || !strings.Contains(out, "xxxxx") {
		t.Fatalf("log not redacted: %s", out)
	}
	err := s.err(base)
	if strings.Contains(err.Error(), "Secret") || !errors.Is(err, base) {
		t.Fatalf("error not redacted or chain lost: %v", err)
	}
	f, err := DSNTemplate("postgres://u:Very-Secret-1@{host}:{port}/{database}?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	d, _ := f(Target{Host: "::1", Port: 5433, Database: "my db"})
	if !strings.Contains(d, "[::1]:5433/my%20db") {
		t.Fatalf("DSN %q", d)
	}
	if _, err := DSNTemplate("postgres://u:Very-Secret-1@{host}:notaport/x"); err == nil || strings.Contains(err.Error(), "Very-Secret-1") {
		t.Fatalf("bad template: %v", err)
	}
}
