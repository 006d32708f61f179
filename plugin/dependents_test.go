package plugin

import "testing"

func TestAddsDependency(t *testing.T) {
	for sql, want := range map[string]bool{
		"CREATE TRIGGER t AFTER UPDATE ON items FOR EACH ROW SET @x = 1":           true,
		"  create view v as select 1":                                              true,
		"/* migration 7 */ ALTER TABLE items ADD FOREIGN KEY (u) REFERENCES users": true,
		"-- rename it\nALTER TABLE a RENAME TO b":                                  true,
		"# a comment\nRENAME TABLE a TO b":                                         true,
		"(create or replace function f() returns trigger as $$ begin end $$)":      true,
		"CREATE TABLE plain (id int)":                                              false,
		"DROP VIEW v":                                                              false,
		"INSERT INTO created VALUES ('trigger')":                                   false,
		"UPDATE items SET name = 'create view'":                                    false,
		"SELECT 1":                                                                 false,
		"creates view":                                                             false,
		"":                                                                         false,
		"/* unterminated":                                                          false,
		"-- only a comment":                                                        false,
	} {
		if got := addsDependency(sql); got != want {
			t.Errorf("addsDependency(%q) = %v; want %v", sql, got, want)
		}
	}
}
