package plugin

import "testing"

func TestIsSchemaChange(t *testing.T) {
	for sql, want := range map[string]bool{
		"CREATE TRIGGER t AFTER UPDATE ON items FOR EACH ROW SET @x = 1": true,
		"  create view v as select 1":                                    true,
		"/* migration 7 */ ALTER TABLE items ADD c int":                  true,
		"-- drop it\nDROP VIEW v":                                        true,
		"# a comment\nRENAME TABLE a TO b":                               true,
		"(create table x (id int))":                                      true,
		"INSERT INTO created VALUES (1)":                                 false,
		"UPDATE items SET name = 'create'":                               false,
		"SELECT 1":                                                       false,
		"creates":                                                        false,
		"":                                                               false,
		"/* unterminated":                                                false,
		"-- only a comment":                                              false,
	} {
		if got := isSchemaChange(sql); got != want {
			t.Errorf("isSchemaChange(%q) = %v; want %v", sql, got, want)
		}
	}
}
