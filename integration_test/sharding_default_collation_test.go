package integration_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/sharding"
)

// Databases whose default collation is an ICU locale, as many production
// clusters' are (initdb --locale-provider=icu, or a libc locale such as
// en_US.UTF-8): a merged ORDER BY over a text column of the default
// collation, on two shards, returns the rows in the order one of those
// databases sorts them itself, not in byte order (it was refused). The
// rows of the order live on both shards.
func TestShardingMergeDatabaseDefaultCollation(t *testing.T) {
	pg := testcluster.PostgresFor(t)
	admin, err := gorm.Open(postgres.Open(pg.PrimaryDSN("postgres")), quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB(admin)
	var names []string
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("fr_icu_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6, i)
		if err := admin.Exec("CREATE DATABASE " + name + " TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en' LOCALE 'C'").Error; err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = pg.DropDatabase(ctx, name)
		})
		names = append(names, name)
	}
	labels := []string{"b", "B", "a", "A", "é", "e", "Z", "z", "ä", "Ω", `say "hi"`, `back\slash`, "{x,y}"}
	var shards []sharding.ShardConfig
	var ref *gorm.DB
	for i, name := range names[1:] {
		d, err := gorm.Open(postgres.Open(pg.PrimaryDSN(name)), quiet())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeDB(d) })
		if err := d.Exec("CREATE TABLE notes (id bigint PRIMARY KEY, user_id bigint NOT NULL, label text NOT NULL)").Error; err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			ref = d
		}
		shards = append(shards, sharding.ShardConfig{Name: fmt.Sprintf("s%d", i), Dialector: postgres.Open(pg.PrimaryDSN(name))})
	}
	db, err := gorm.Open(postgres.Open(pg.PrimaryDSN(names[0])), quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB(db)
	s := sharding.New(sharding.Config{
		Tables:    []sharding.Table{{Name: "notes", Key: "user_id"}},
		Algorithm: sharding.EvenBuckets(1024, "s0", "s1"),
		Shards:    shards,
	})
	if err := db.Use(s); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	type note struct {
		ID     int64
		UserID int64
		Label  string
	}
	onShard := map[string]int{}
	for i, l := range labels {
		user := int64(1 + 600*(i%2)) // buckets 1 and 601: one on each shard
		onShard[s.ShardOf(user)]++
		if err := db.Table("notes").Create(&note{ID: int64(i + 1), UserID: user, Label: l}).Error; err != nil {
			t.Fatal(err)
		}
	}
	if len(onShard) != 2 {
		t.Fatalf("rows on %v, want both shards", onShard)
	}
	var want []string
	quoted := make([]string, len(labels))
	for i, l := range labels {
		quoted[i] = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(l) + `"`
	}
	if err := ref.Raw("SELECT v FROM unnest(?::text[]) AS u(v) ORDER BY v", "{"+strings.Join(quoted, ",")+"}").Scan(&want).Error; err != nil {
		t.Fatal(err)
	}
	bytes := slices.Clone(labels)
	slices.Sort(bytes)
	if slices.Equal(want, bytes) {
		t.Fatalf("the database's order %q is byte order: the test cannot tell them apart", want)
	}
	var got []string
	if err := db.Table("notes").Order("label").Order("id").Pluck("label", &got).Error; err != nil {
		t.Fatalf("merged ORDER BY label: %v", err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("merged ORDER BY label: %q, want the database's order %q", got, want)
	}
	var top []string
	if err := db.Table("notes").Order("label DESC").Limit(3).Pluck("label", &top).Error; err != nil {
		t.Fatalf("merged ORDER BY label DESC LIMIT 3: %v", err)
	}
	if r := slices.Clone(want); !slices.Equal(top, func() []string { slices.Reverse(r); return r[:3] }()) {
		t.Fatalf("merged ORDER BY label DESC LIMIT 3: %q, want the last three of %q reversed", top, want)
	}
}
