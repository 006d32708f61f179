package registry

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/freshread/freshread/internal/harness/testcluster"
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
	rdb.Del(ctx, prefix+Key)
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
	rdb.SAdd(ctx, prefix+Key, `{"host":"x","port":1,"database":"y","password":"hunter2"}`, "not json")
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
