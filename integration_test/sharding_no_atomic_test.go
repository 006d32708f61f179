package integration_test

import (
	"errors"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/sharding"
)

// TestShardingNoAtomicCommitRefusedPostgres is TestShardingNoAtomicCommitRefused
// on PostgreSQL shards of a server with max_prepared_transactions = 0
// (PostgreSQL's default), which cannot take part in two-phase commit: a
// write over two shards is refused with ErrNoAtomicCommit and leaves both
// rows as they were; with Config.SequentialCommits it commits shard by
// shard.
func TestShardingNoAtomicCommitRefusedPostgres(t *testing.T) {
	pg := testcluster.PostgresWithFor(t, 1, "max_prepared_transactions=0")
	names := []string{"p0", "p1"}
	dbs := map[string]string{}
	direct := map[string]*gorm.DB{}
	for _, n := range names {
		dbs[n] = pg.CreateDatabase(t)
		d, err := gorm.Open(postgres.Open(pg.PrimaryDSN(dbs[n])), quiet())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeDB(d) })
		var setting int
		if err := d.Raw("SELECT current_setting('max_prepared_transactions')::int").Scan(&setting).Error; err != nil {
			t.Fatal(err)
		}
		if setting != 0 {
			t.Fatalf("the server runs with max_prepared_transactions = %d, want 0: the test exercises nothing", setting)
		}
		if err := d.AutoMigrate(&ShOrder{}); err != nil {
			t.Fatal(err)
		}
		direct[n] = d
	}
	def := pg.CreateDatabase(t)
	open := func(sequential bool) (*gorm.DB, *sharding.Sharding) {
		var shards []sharding.ShardConfig
		for _, n := range names {
			shards = append(shards, sharding.ShardConfig{
				Name:      n,
				Dialector: postgres.Open(pg.PrimaryDSN(dbs[n])),
				Replicas:  []plugin.Replica{{Name: "r0", Dialector: postgres.Open(pg.ReplicaDSN(0, dbs[n]))}},
				Freshness: plugin.Config{PollInterval: 5 * time.Millisecond},
			})
		}
		db, err := gorm.Open(postgres.Open(pg.PrimaryDSN(def)), quiet())
		if err != nil {
			t.Fatal(err)
		}
		s := sharding.New(sharding.Config{
			Tables:            []sharding.Table{{Name: "orders", Key: "user_id", ID: "id"}},
			Shards:            shards,
			Algorithm:         sharding.EvenBuckets(1024, names...),
			SequentialCommits: sequential,
		})
		if err := db.Use(s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			s.Close()
			closeDB(db)
		})
		return db, s
	}
	db, s := open(false)
	var a, b int64 = 1, 0
	for u := int64(2); b == 0; u++ {
		if s.ShardOf(u) != s.ShardOf(a) {
			b = u
		}
	}
	if s.ShardOf(a) != names[0] {
		a, b = b, a
	}
	x := ShOrder{ID: 9400, UserID: a, Status: "old"}
	y := ShOrder{ID: 9401, UserID: b, Status: "old"}
	for _, o := range []*ShOrder{&x, &y} {
		if err := db.Create(o).Error; err != nil {
			t.Fatal(err)
		}
	}
	both := func() [2]string {
		var out [2]string
		for i, o := range []ShOrder{x, y} {
			var got ShOrder
			if err := direct[names[i]].Where("id = ?", o.ID).Take(&got).Error; err != nil {
				t.Fatal(err)
			}
			out[i] = got.Status
		}
		return out
	}
	update := func(db *gorm.DB) error {
		return db.Model(&ShOrder{}).Where("user_id IN ?", []int64{a, b}).Update("status", "new").Error
	}
	err := update(db)
	if !errors.Is(err, sharding.ErrNoAtomicCommit) {
		t.Fatalf("an Update over two shards without two-phase commit: %v, want ErrNoAtomicCommit", err)
	}
	if got := both(); got != [2]string{"old", "old"} {
		t.Fatalf("after the refused Update the shards hold %v, want both old", got)
	}
	seq, _ := open(true)
	if err := update(seq); err != nil {
		t.Fatalf("an Update over two shards with SequentialCommits: %v", err)
	}
	if got := both(); got != [2]string{"new", "new"} {
		t.Fatalf("after the Update with SequentialCommits the shards hold %v, want both new", got)
	}
}
