package merge

import (
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// The SQL the plan adds is quoted for the statement's dialect: backticks
// on MySQL and MariaDB (where "status" is a string: every hidden group
// column had the same value, and the merge folded the groups into one).
func TestDialectSQL(t *testing.T) {
	open := func(d gorm.Dialector) *gorm.Statement {
		db, err := gorm.Open(d, &gorm.Config{DryRun: true, SkipDefaultTransaction: true, DisableAutomaticPing: true})
		if err != nil {
			t.Fatal(err)
		}
		return db.Statement
	}
	my := open(mysql.New(mysql.Config{DSN: "u:p@tcp(127.0.0.1:1)/x", SkipInitializeWithVersion: true}))
	pg := open(postgres.New(postgres.Config{DSN: "host=127.0.0.1 port=1"}))
	for _, c := range []struct{ in, mysql string }{
		{`"status" AS "__fr_g0"`, "`status` AS `__fr_g0`"},
		{`"orders"."amount" AS "__fr_k0", sum(amount) AS "__fr_s1"`, "`orders`.`amount` AS `__fr_k0`, sum(amount) AS `__fr_s1`"},
		{`status = 'say "hi"' AND "a" = ?`, "status = 'say \"hi\"' AND `a` = ?"},
		{`'it''s "x"', 'a\'"b"', ` + "`we\"ird`", `'it''s "x"', 'a\'"b"', ` + "`we\"ird`"},
		{"no quotes", "no quotes"},
	} {
		if got := dialectSQL(my, c.in); got != c.mysql {
			t.Errorf("mysql %s:\n got  %s\n want %s", c.in, got, c.mysql)
		}
		if got := dialectSQL(pg, c.in); got != c.in {
			t.Errorf("postgres %s: %s, want it unchanged", c.in, got)
		}
	}
}
