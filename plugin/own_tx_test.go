package plugin

import "testing"

func TestOwnTxStatement(t *testing.T) {
	for q, want := range map[string]bool{
		"UPDATE items SET name = 'x' WHERE id = 1":                              true,
		"insert into items (id) values (1) on conflict do nothing":              true,
		"DELETE FROM items WHERE id = $1":                                       true,
		"MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE":          true,
		"WITH d AS (DELETE FROM t RETURNING id) INSERT INTO u SELECT id FROM d": true,
		"/* c */ UPDATE t SET a = ';' WHERE b = 1":                              true,
		"UPDATE t SET a = 1; UPDATE u SET b = 2":                                true,
		"CREATE TABLE t (id bigint primary key)":                                true,
		"ALTER TABLE t ADD COLUMN c int; CREATE INDEX i ON t (c)":               true,
		"DROP TABLE IF EXISTS t CASCADE":                                        true,
		"TRUNCATE t":                                                            true,
		"BEGIN; UPDATE t SET a = 1; COMMIT":                                     false,
		"UPDATE t SET a = 1; VACUUM t":                                          false,
		"VACUUM items":                                                          false,
		"REINDEX TABLE t":                                                       false,
		"CREATE INDEX CONCURRENTLY i ON t (a)":                                  false,
		"CREATE UNIQUE INDEX CONCURRENTLY i ON t (a)":                           false,
		"DROP INDEX CONCURRENTLY i":                                             false,
		"CREATE DATABASE d":                                                     false,
		"ALTER DATABASE d SET TABLESPACE s":                                     false,
		"ALTER SYSTEM SET work_mem = '1MB'":                                     false,
		"DROP SUBSCRIPTION s":                                                   false,
		"SELECT pg_advisory_lock(1)":                                            false,
		"COMMIT PREPARED 'x'":                                                   false,
		"":                                                                      false,
	} {
		if got := ownTxStatement(q); got != want {
			t.Errorf("ownTxStatement(%q) = %v, want %v", q, got, want)
		}
	}
}
