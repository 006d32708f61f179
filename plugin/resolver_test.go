package plugin

import (
	"errors"
	"strings"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// A Resolver refuses, at db.Use and before it connects anywhere, the
// registrations it cannot serve, each with an error naming the remedy.
func TestResolverRefusesConfigs(t *testing.T) {
	src := postgres.Open("postgres://app@127.0.0.1:1/none")
	for _, c := range []struct {
		name string
		r    *Resolver
		want string
	}{
		{"two defaults", Register(Config{}).Register(Config{}), "two default resolvers"},
		{"default with Sources", Register(Config{Sources: []gorm.Dialector{src}}), "open the *gorm.DB on that source"},
	} {
		db, err := gorm.Open(postgres.Open("postgres://app@127.0.0.1:1/none"), &gorm.Config{DisableAutomaticPing: true, Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		err = db.Use(c.r)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want ErrConfig saying %q", c.name, err, c.want)
		}
	}
}

// dbresolver's raw-SQL table lookup, which sends raw SQL to the resolver
// it went to there.
func TestRawSQLTable(t *testing.T) {
	for sql, want := range map[string]string{
		"SELECT * FROM orders WHERE id = 1":        "orders",
		`UPDATE "orders" SET name = 'x'`:           "orders",
		"INSERT INTO orders (id) VALUES (1)":       "orders",
		"select 1":                                 "",
		"DELETE FROM users WHERE id IN (SELECT 1)": "users",
	} {
		if got := rawSQLTable(sql); got != want {
			t.Errorf("rawSQLTable(%q) = %q, want %q", sql, got, want)
		}
	}
}
