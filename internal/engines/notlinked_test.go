package engines_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver
	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/internal/engines"
	"github.com/freshread/freshread/plugin"
	"github.com/freshread/freshread/reshard"
	"github.com/freshread/freshread/sharding"
)

// This test package links neither mysqlfamily nor internal/mysqlclassify:
// MySQL and MariaDB are refused, never misrouted.

func TestMySQLFamilyNotLinked(t *testing.T) {
	if engines.MySQLFamilyLinked() {
		t.Fatal("MySQL/MariaDB support is linked into a test that imports none of it")
	}
	db, err := gorm.Open(mysql.New(mysql.Config{DSN: "u:p@tcp(127.0.0.1:1)/app", SkipInitializeWithVersion: true}),
		&gorm.Config{DisableAutomaticPing: true})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Use(plugin.New(plugin.Config{}))
	want := `plugin: MySQL/MariaDB support is not linked: add import _ "github.com/freshread/freshread/mysqlfamily"`
	if err == nil || err.Error() != want {
		t.Fatalf("db.Use on MySQL without mysqlfamily: %v, want %s", err, want)
	}
	if !errors.Is(err, plugin.ErrConfig) {
		t.Errorf("db.Use: %v is not plugin.ErrConfig", err)
	}
	var nl *engines.NotLinkedError
	if !errors.As(err, &nl) {
		t.Errorf("db.Use: %v is not a NotLinkedError", err)
	}
}

func TestShardingMySQLNotLinked(t *testing.T) {
	open := func() *gorm.DB {
		db, err := gorm.Open(mysql.New(mysql.Config{DSN: "u:p@tcp(127.0.0.1:1)/app", SkipInitializeWithVersion: true}),
			&gorm.Config{DisableAutomaticPing: true})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	db := open()
	err := db.Use(sharding.New(sharding.Config{
		Shards: []sharding.ShardConfig{{Name: "a", DB: open()}},
		Tables: []sharding.Table{{Name: "orders", Key: "user_id"}},
	}))
	want := `sharding: MySQL/MariaDB support is not linked: add import _ "github.com/freshread/freshread/mysqlfamily"`
	if err == nil || err.Error() != want {
		t.Fatalf("db.Use of sharding on MariaDB shards without mysqlfamily: %v, want %s", err, want)
	}
	if !errors.Is(err, sharding.ErrConfig) {
		t.Errorf("%v is not sharding.ErrConfig", err)
	}
}

func TestClassifyMySQLNotLinked(t *testing.T) {
	c := classify.New(classify.Config{Dialect: classify.MySQL})
	r := c.Classify("SELECT * FROM t")
	if r.Kind != classify.Write || !r.UnknownTables || !strings.Contains(r.Reason, "mysqlfamily") {
		t.Fatalf("MySQL classification without mysqlfamily: %+v, want a Write to unknown tables naming mysqlfamily", r)
	}
	// PostgreSQL needs nothing more.
	if r := classify.New(classify.Config{}).Classify("SELECT * FROM t"); r.Kind != classify.Read {
		t.Fatalf("PostgreSQL: %+v", r)
	}
}

// A mover given MariaDB shards without reshard/mariadb linked is refused
// at reshard.New, naming the import; it never takes them for PostgreSQL.
func TestReshardMariaDBNotLinked(t *testing.T) {
	if engines.MariaDBBinlog != nil {
		t.Fatal("the MariaDB binlog reader is linked into a test that imports none of it")
	}
	db, err := sql.Open("mysql", "u:p@tcp(127.0.0.1:1)/app")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = reshard.New(reshard.Config{
		Shards: []reshard.Shard{{Name: "a", DB: db}, {Name: "b", DB: db}},
		Tables: []reshard.Table{{Name: "orders", Key: "user_id"}},
		Store:  sharding.NewSQLMapStore(db),
	}, reshard.Move{From: "a", To: "b", Buckets: []int{1}})
	want := `reshard: moving buckets between MariaDB shards is not linked: add import _ "github.com/freshread/freshread/reshard/mariadb"`
	if err == nil || err.Error() != want {
		t.Fatalf("reshard.New on MariaDB shards without reshard/mariadb: %v, want %s", err, want)
	}
	if !errors.Is(err, reshard.ErrConfig) {
		t.Errorf("reshard.New: %v is not reshard.ErrConfig", err)
	}
}
