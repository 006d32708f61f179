package plugin

import (
	"testing"

	"github.com/freshread/freshread/classify"
)

func TestPinnedStepMySQL(t *testing.T) {
	p := &Plugin{classifier: classify.New(classify.Config{Dialect: classify.MySQL})}
	for q, want := range map[string]pinnedTxStep{
		"BEGIN":                       pinnedBegin,
		"start transaction read only": pinnedBegin,
		"BEGIN NOT ATOMIC UPDATE t SET a = 1; END": pinnedMayCommit,
		"COMMIT":                                     pinnedCommit,
		"ROLLBACK":                                   pinnedRollback,
		"ROLLBACK TO SAVEPOINT s":                    0,
		"SET autocommit = 0":                         pinnedAutocommitOff,
		"set @@session.autocommit := OFF":            pinnedAutocommitOff,
		"SET SESSION autocommit=1":                   pinnedAutocommitOn,
		"SET autocommit = @v":                        pinnedMayCommit,
		"SET autocommit = 0, sql_mode = ''":          pinnedAutocommitOff,
		"SET sql_mode = 'autocommit'":                0,
		"SET PASSWORD = PASSWORD('x')":               pinnedMayCommit,
		"UPDATE items SET name = 'x' WHERE id = 1":   0,
		"/* c */ SELECT 1":                           0,
		"(SELECT 1) UNION (SELECT 2)":                0,
		"LOAD DATA INFILE 'f' INTO TABLE t":          0,
		"CREATE TEMPORARY TABLE x (i INT)":           pinnedMayCommit,
		"TRUNCATE TABLE t":                           pinnedMayCommit,
		"LOCK TABLES t WRITE":                        pinnedMayCommit,
		"CALL p()":                                   pinnedMayCommit,
		"UPDATE t SET a = 1; SELECT 1":               pinnedMayCommit,
		"-- BEGIN\nUPDATE t SET a = ';' WHERE b = 1": 0,
		"XA START 'a','b'":                           pinnedBegin,
		"xa begin X'01'":                             pinnedBegin,
		"XA END 'a'":                                 0,
		"XA PREPARE 'a'":                             0,
		"XA RECOVER FORMAT='SQL'":                    0,
		"XA COMMIT 'a'":                              pinnedCommit,
		"XA COMMIT 'a' ONE PHASE":                    pinnedCommit,
		"XA ROLLBACK 'a'":                            pinnedRollback,
		"XA":                                         pinnedMayCommit,
	} {
		if got := p.pinnedStep(q); got != want {
			t.Errorf("pinnedStep(%q) = %d, want %d", q, got, want)
		}
	}
}

func TestPinnedStepPostgres(t *testing.T) {
	p := &Plugin{classifier: classify.New(classify.Config{Dialect: classify.Postgres})}
	for q, want := range map[string]pinnedTxStep{
		"CREATE TABLE x (i int)":               0,
		"UPDATE t SET a = 1; SELECT 1":         0,
		"UPDATE t SET a = 1; COMMIT":           pinnedMayCommit,
		"BEGIN; UPDATE t SET a = 1":            pinnedMayCommit,
		"SELECT 'BEGIN; COMMIT' AS x":          0,
		"COMMIT":                               pinnedCommit,
		"ROLLBACK":                             pinnedRollback,
		"START TRANSACTION ISOLATION LEVEL RR": pinnedBegin,
	} {
		if got := p.pinnedStep(q); got != want {
			t.Errorf("pinnedStep(%q) = %d, want %d", q, got, want)
		}
	}
}
