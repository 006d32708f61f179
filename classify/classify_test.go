package classify

import (
	"slices"
	"strings"
	"sync"
	"testing"
)

type tcase struct {
	sql     string
	kind    Kind
	reads   []string
	writes  []string
	locks   bool
	unknown bool
	reason  string // substring of Reason, when set
}

func checkCases(t *testing.T, d Dialect, cases []tcase, opts ...func(*Config)) {
	t.Helper()
	cfg := Config{Dialect: d, CacheSize: -1}
	for _, o := range opts {
		o(&cfg)
	}
	c := New(cfg)
	for _, tc := range cases {
		got := c.Classify(tc.sql)
		if got.Kind != tc.kind {
			t.Errorf("%v %q: kind %v, want %v (reason %q)", d, tc.sql, got.Kind, tc.kind, got.Reason)
		}
		if !slices.Equal(got.Reads, tc.reads) {
			t.Errorf("%v %q: reads %q, want %q", d, tc.sql, got.Reads, tc.reads)
		}
		if !slices.Equal(got.Writes, tc.writes) {
			t.Errorf("%v %q: writes %q, want %q", d, tc.sql, got.Writes, tc.writes)
		}
		if got.Locks != tc.locks {
			t.Errorf("%v %q: locks %v, want %v", d, tc.sql, got.Locks, tc.locks)
		}
		if got.UnknownTables != tc.unknown {
			t.Errorf("%v %q: unknown tables %v, want %v", d, tc.sql, got.UnknownTables, tc.unknown)
		}
		if tc.reason != "" && !strings.Contains(got.Reason, tc.reason) {
			t.Errorf("%v %q: reason %q, want it to contain %q", d, tc.sql, got.Reason, tc.reason)
		}
		if got.Kind != Write && got.Reason != "" {
			t.Errorf("%v %q: reason %q set on %v", d, tc.sql, got.Reason, got.Kind)
		}
	}
}

func l(s ...string) []string { return s }

func TestPostgresComments(t *testing.T) {
	checkCases(t, Postgres, []tcase{
		{sql: "-- DELETE FROM t\nSELECT 1", kind: Read},
		{sql: "SELECT 1 -- ; DELETE FROM t", kind: Read},
		{sql: "/* DELETE FROM t */ SELECT * FROM a", kind: Read, reads: l("a")},
		{sql: "/* outer /* nested; DELETE FROM t */ still comment */ SELECT 1", kind: Read},
		{sql: "/* unterminated /* nested */ SELECT 1", kind: Write, unknown: true, reason: "unparseable"},
		{sql: "SELECT 1 /* open", kind: Write, unknown: true, reason: "unparseable"},
		{sql: "SELECT 1 # 2", kind: Read}, // # is an operator in PostgreSQL, not a comment
	})
}

func TestPostgresLiterals(t *testing.T) {
	checkCases(t, Postgres, []tcase{
		{sql: "SELECT 'DELETE FROM t; UPDATE x SET a=1'", kind: Read},
		{sql: "SELECT 'it''s; DROP TABLE t'", kind: Read},
		{sql: `SELECT E'a\'; DELETE FROM t; --'`, kind: Read},
		{sql: `SELECT 'a\'; DELETE FROM t`, kind: Write, writes: l("t")}, // standard strings: \ is literal
		{sql: "SELECT $$; DELETE FROM t $$", kind: Read},
		{sql: "SELECT $tag$ $$ ; DELETE FROM t $tag$ FROM a", kind: Read, reads: l("a")},
		{sql: "SELECT $tag$ unterminated", kind: Write, unknown: true, reason: "unparseable"},
		{sql: "SELECT 'open", kind: Write, unknown: true, reason: "unparseable"},
		{sql: `SELECT U&'d\0061t\+000061'`, kind: Read},
		{sql: "SELECT B'1010', X'ff', N'x'", kind: Read},
		{sql: "SELECT * FROM t WHERE id = $1 AND name = $2", kind: Read, reads: l("t")},
	})
}

func TestPostgresIdentifiers(t *testing.T) {
	checkCases(t, Postgres, []tcase{
		{sql: `SELECT * FROM "Users" u JOIN Orders o ON o.uid = u.id`, kind: Read, reads: l("Users", "orders")},
		{sql: `SELECT * FROM "my""table"`, kind: Read, reads: l(`my"table`)},
		{sql: `SELECT * FROM Public.Users, "S"."T"`, kind: Read, reads: l("S.T", "public.users")},
		{sql: `SELECT * FROM db.sch.tab`, kind: Read, reads: l("sch.tab")},
		{sql: `UPDATE "Acc" SET "update" = 1`, kind: Write, writes: l("Acc")},
		{sql: `SELECT "select" FROM "from"`, kind: Read, reads: l("from")},
		{sql: `SELECT * FROM "open`, kind: Write, unknown: true, reason: "unparseable"},
		{sql: `SELECT U&"d\0061t" FROM t`, kind: Read, reads: l("t")},
	})
}

func TestPostgresCTE(t *testing.T) {
	checkCases(t, Postgres, []tcase{
		{sql: "WITH x AS (SELECT * FROM a) SELECT * FROM x JOIN b ON b.id = x.id", kind: Read, reads: l("a", "b")},
		{sql: "WITH x AS (UPDATE t SET a = 1 RETURNING *) SELECT * FROM x", kind: Write, writes: l("t")},
		{sql: "WITH x AS (DELETE FROM t RETURNING id) INSERT INTO log SELECT id FROM x", kind: Write, writes: l("log", "t")},
		{sql: "SELECT * FROM (WITH y AS (INSERT INTO t VALUES (1) RETURNING *) SELECT * FROM y) s", kind: Write, writes: l("t")},
		{sql: "WITH x(a, b) AS MATERIALIZED (SELECT 1, 2) SELECT * FROM x", kind: Read},
		{sql: "WITH x AS NOT MATERIALIZED (SELECT * FROM a) SELECT * FROM x", kind: Read, reads: l("a")},
		// Non-recursive CTE body referencing a table of the same name.
		{sql: "WITH users AS (SELECT * FROM users WHERE active) SELECT * FROM users", kind: Read, reads: l("users")},
		{sql: "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT * FROM r", kind: Read},
		// A CTE name is only visible in its own query.
		{sql: "SELECT * FROM (WITH x AS (SELECT 1) SELECT * FROM x) s, x", kind: Read, reads: l("x")},
		{sql: "SELECT * FROM generate_series(1, 3) WITH ORDINALITY AS g(v, i)", kind: Read},
	})
}

func TestPostgresSelectInto(t *testing.T) {
	checkCases(t, Postgres, []tcase{
		{sql: "SELECT * INTO new_t FROM t1", kind: Write, reads: l("t1"), writes: l("new_t")},
		{sql: "SELECT * INTO UNLOGGED new_t FROM t1", kind: Write, reads: l("t1"), writes: l("new_t")},
		{sql: "SELECT * INTO TEMP tmp_t FROM t1", kind: Buffer, reads: l("t1")},
		{sql: "SELECT * INTO TEMPORARY TABLE tmp_t FROM t1", kind: Buffer, reads: l("t1")},
		{sql: "INSERT INTO t SELECT * FROM s", kind: Write, reads: l("s"), writes: l("t")},
	})
}

func TestPostgresLocking(t *testing.T) {
	checkCases(t, Postgres, []tcase{
		{sql: "SELECT * FROM t FOR UPDATE", kind: Write, reads: l("t"), locks: true},
		{sql: "SELECT * FROM t FOR NO KEY UPDATE OF t SKIP LOCKED", kind: Write, reads: l("t"), locks: true},
		{sql: "SELECT * FROM t FOR KEY SHARE NOWAIT", kind: Write, reads: l("t"), locks: true},
		{sql: "SELECT * FROM a WHERE id IN (SELECT id FROM b FOR SHARE)", kind: Write, reads: l("a", "b"), locks: true},
		{sql: "SELECT * FROM a WHERE x = 'FOR UPDATE'", kind: Read, reads: l("a")},
		{sql: "SELECT substring(s FROM 1 FOR 2) FROM a", kind: Read, reads: l("a")},
		{sql: "LOCK TABLE t1, ONLY t2 IN SHARE MODE", kind: Write, reads: l("t1", "t2"), locks: true},
		{sql: "SELECT pg_advisory_xact_lock(1)", kind: Write, locks: true},
	})
}

func TestPostgresFunctions(t *testing.T) {
	checkCases(t, Postgres, []tcase{
		{sql: "SELECT nextval('public.users_id_seq')", kind: Write, writes: l("public.users_id_seq")},
		{sql: `SELECT setval('"Seq"', 10)`, kind: Write, writes: l("Seq")},
		{sql: "SELECT nextval(seq_name_column) FROM cfg", kind: Write, reads: l("cfg"), unknown: true, reason: "nextval"},
		{sql: "SELECT txid_current()", kind: Write, unknown: true},
		{sql: "SELECT pg_current_xact_id()", kind: Write, unknown: true},
		{sql: "SELECT set_config('search_path', 'x', false)", kind: Buffer},
		{sql: "SELECT pg_last_wal_replay_lsn(), now(), count(*), coalesce(a, 0), date_trunc('day', ts) FROM t", kind: Read, reads: l("t")},
		{sql: "SELECT pg_catalog.now()", kind: Read},
		{sql: "SELECT my_func(1)", kind: Write, unknown: true, reason: "unknown function my_func"},
		{sql: `SELECT "MyFunc"(1)`, kind: Write, unknown: true, reason: "unknown function MyFunc"},
		{sql: "SELECT app.f(1)", kind: Write, unknown: true, reason: "unknown function app.f"},
		{sql: "SELECT CAST(x AS varchar(10)), x::numeric(10,2), y::character varying(5) FROM t", kind: Read, reads: l("t")},
		{sql: "SELECT * FROM t WHERE a IN (1, 2) AND EXISTS (SELECT 1) AND b = ANY(ARRAY[1,2])", kind: Read, reads: l("t")},
		{sql: "SELECT count(*) FILTER (WHERE a > 1) OVER (PARTITION BY b ORDER BY c) FROM t", kind: Read, reads: l("t")},
		{sql: "SELECT * FROM t WHERE a IS DISTINCT FROM b", kind: Read, reads: l("t")},
		{sql: "SELECT extract(epoch FROM now()), trim(both 'x' from s) FROM t", kind: Read, reads: l("t")},
		{sql: "SELECT pg_notify('ch', 'x')", kind: Write, unknown: true},
	})
	checkCases(t, Postgres, []tcase{
		{sql: "SELECT my_func(1), App.Other(2)", kind: Read},
		{sql: "SELECT public.my_func(1)", kind: Read},
		{sql: "SELECT nextval('s')", kind: Write, writes: l("s")}, // side-effect built-ins stay Write
	}, func(c *Config) { c.ReadOnlyFunctions = []string{"My_Func", "app.other", "nextval"} })
}

func TestPostgresStatements(t *testing.T) {
	checkCases(t, Postgres, []tcase{
		{sql: "EXPLAIN SELECT * FROM a", kind: Read, reads: l("a")},
		{sql: "EXPLAIN DELETE FROM a", kind: Read},
		{sql: "EXPLAIN ANALYZE DELETE FROM a", kind: Write, writes: l("a")},
		{sql: "EXPLAIN (ANALYZE false) DELETE FROM a", kind: Read},
		{sql: "EXPLAIN (ANALYZE, FORMAT JSON) UPDATE a SET x = 1", kind: Write, writes: l("a")},
		{sql: "EXPLAIN VERBOSE SELECT my_func()", kind: Read},
		{sql: "PREPARE p (int) AS DELETE FROM a WHERE id = $1", kind: Buffer},
		{sql: "EXECUTE p(1)", kind: Write, unknown: true, reason: "EXECUTE"},
		{sql: "DEALLOCATE ALL", kind: Buffer},
		{sql: "COPY a TO STDOUT", kind: Read, reads: l("a")},
		{sql: "COPY a (x, y) TO STDOUT WITH (FORMAT csv)", kind: Read, reads: l("a")},
		{sql: "COPY (SELECT * FROM a JOIN b USING (id)) TO STDOUT", kind: Read, reads: l("a", "b")},
		{sql: "COPY a FROM STDIN", kind: Write, writes: l("a")},
		{sql: "COPY a TO '/tmp/x'", kind: Write, reads: l("a")},
		{sql: "COPY a TO PROGRAM 'gzip > /tmp/x'", kind: Write, reads: l("a")},
		{sql: "CALL proc(1)", kind: Write, unknown: true, reason: "procedure"},
		{sql: "DO $$ BEGIN DELETE FROM t; END $$", kind: Write, unknown: true, reason: "DO"},
		{sql: "LISTEN ch", kind: Buffer},
		{sql: "UNLISTEN *", kind: Buffer},
		{sql: "NOTIFY ch, 'x'", kind: Write},
		{sql: "VACUUM (VERBOSE, ANALYZE) a, b", kind: Write, writes: l("a", "b")},
		{sql: "VACUUM", kind: Write, unknown: true},
		{sql: "SET search_path TO app, public", kind: Buffer},
		{sql: "SET SESSION work_mem = '64MB'", kind: Buffer},
		{sql: "SET LOCAL statement_timeout = 0", kind: Buffer},
		{sql: "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", kind: Buffer},
		{sql: "SET ROLE admin", kind: Buffer},
		{sql: "ALTER SYSTEM SET work_mem = '1GB'", kind: Write, unknown: true},
		{sql: "BEGIN ISOLATION LEVEL REPEATABLE READ", kind: Buffer},
		{sql: "START TRANSACTION READ ONLY", kind: Buffer},
		{sql: "COMMIT", kind: Write, reason: ReasonTxnEnd},
		{sql: "ROLLBACK TO SAVEPOINT s", kind: Write, reason: ReasonTxnEnd},
		{sql: "RELEASE SAVEPOINT s", kind: Buffer},
		{sql: "DECLARE c CURSOR WITH HOLD FOR SELECT * FROM a", kind: Buffer, reads: l("a")},
		{sql: "DECLARE c CURSOR FOR SELECT * FROM a FOR UPDATE", kind: Write, reads: l("a"), locks: true},
		{sql: "TABLE a", kind: Read, reads: l("a")},
		{sql: "VALUES (1), (2)", kind: Read},
		{sql: "SHOW ALL", kind: Read},
		{sql: "", kind: Read},
		{sql: " ; ; ", kind: Read},
		{sql: "SELECT (1", kind: Write, unknown: true, reason: "unparseable"},
		{sql: "SELECT 1)", kind: Write, unknown: true, reason: "unparseable"},
		{sql: "FOO BAR", kind: Write, unknown: true},
	})
}

func TestPostgresDDLAndTemp(t *testing.T) {
	checkCases(t, Postgres, []tcase{
		{sql: "CREATE TEMP TABLE tmp (id int, name varchar(20) DEFAULT 'x')", kind: Buffer},
		{sql: "CREATE TEMPORARY TABLE tmp AS SELECT * FROM a", kind: Buffer, reads: l("a")},
		{sql: "CREATE LOCAL TEMP TABLE tmp (id int)", kind: Buffer},
		{sql: "CREATE TEMP TABLE tmp (id int DEFAULT nextval('s'))", kind: Write, writes: l("s")},
		{sql: "CREATE TEMP TABLE tmp (id int); INSERT INTO tmp SELECT id FROM a; UPDATE tmp SET id = 2; SELECT * FROM tmp; DROP TABLE tmp", kind: Buffer, reads: l("a")},
		{sql: "CREATE TEMP TABLE tmp (id int); INSERT INTO public.tmp VALUES (1)", kind: Write, writes: l("public.tmp")},
		{sql: "SELECT * INTO TEMP tmp FROM a; DELETE FROM tmp", kind: Buffer, reads: l("a")},
		{sql: "CREATE TABLE t (id serial)", kind: Write, writes: l("t")},
		{sql: "CREATE UNLOGGED TABLE t (id int)", kind: Write, writes: l("t")},
		{sql: "CREATE TABLE t AS SELECT * FROM a", kind: Write, reads: l("a"), writes: l("t")},
		{sql: "CREATE MATERIALIZED VIEW mv AS SELECT * FROM a", kind: Write, reads: l("a"), writes: l("mv")},
		{sql: "CREATE UNIQUE INDEX CONCURRENTLY i ON t (a)", kind: Write, writes: l("t")},
		// CASCADE drops dependent views and constraints, which are not named.
		{sql: "DROP TABLE a, s.b CASCADE", kind: Write, writes: l("a", "s.b"), unknown: true},
		{sql: "DROP FUNCTION f", kind: Write, unknown: true},
		{sql: "TRUNCATE a, b RESTART IDENTITY", kind: Write, writes: l("a", "b")},
		// CASCADE empties the tables whose foreign keys reference a or b.
		{sql: "TRUNCATE a, b RESTART IDENTITY CASCADE", kind: Write, writes: l("a", "b"), unknown: true},
		{sql: "TRUNCATE TABLE ONLY a CASCADE", kind: Write, writes: l("a"), unknown: true},
		{sql: "TRUNCATE a RESTRICT", kind: Write, writes: l("a")},
		{sql: "ALTER TABLE IF EXISTS ONLY s.t ADD COLUMN c int", kind: Write, writes: l("s.t")},
		// [NO] INHERIT changes what a read of the parent returns.
		{sql: "ALTER TABLE sub NO INHERIT base", kind: Write, writes: l("base", "sub")},
		{sql: "ALTER TABLE sub INHERIT base", kind: Write, writes: l("base", "sub")},
		{sql: "ALTER TABLE ev DETACH PARTITION ev_x CONCURRENTLY", kind: Write, writes: l("ev", "ev_x")},
		{sql: "ALTER TABLE ev ATTACH PARTITION ev_x FOR VALUES IN (1)", kind: Write, writes: l("ev", "ev_x")},
		{sql: "ALTER TABLE t ADD COLUMN partition int", kind: Write, writes: l("t")},
		{sql: "REFRESH MATERIALIZED VIEW CONCURRENTLY mv", kind: Write, writes: l("mv")},
		{sql: "GRANT SELECT ON t TO u", kind: Write, unknown: true},
	})
}

func TestPostgresDML(t *testing.T) {
	checkCases(t, Postgres, []tcase{
		{sql: `UPDATE "users" SET "name"=$1,"updated_at"=$2 WHERE "users"."deleted_at" IS NULL AND "id" = $3`, kind: Write, writes: l("users")},
		{sql: "UPDATE a SET x = b.x FROM b JOIN c ON c.id = b.id WHERE a.id = b.id", kind: Write, reads: l("b", "c"), writes: l("a")},
		{sql: "UPDATE ONLY a AS aa SET x = 1", kind: Write, writes: l("a")},
		{sql: "DELETE FROM a USING b, c WHERE a.id = b.id", kind: Write, reads: l("b", "c"), writes: l("a")},
		{sql: "DELETE FROM a USING b JOIN c USING (id)", kind: Write, reads: l("b", "c"), writes: l("a")},
		{sql: "INSERT INTO a AS x (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET id = excluded.id", kind: Write, writes: l("a")},
		{sql: "INSERT INTO a (id) VALUES (1) ON CONFLICT ON CONSTRAINT a_pkey DO NOTHING", kind: Write, writes: l("a")},
		{sql: "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)", kind: Write, reads: l("s"), writes: l("t")},
		{sql: `SELECT "users"."id","users"."name","Company"."id" AS "Company__id" FROM "users" LEFT JOIN "companies" "Company" ON "users"."company_id" = "Company"."id" WHERE "users"."deleted_at" IS NULL ORDER BY "users"."id" LIMIT $1`,
			kind: Read, reads: l("companies", "users")},
		{sql: "SELECT * FROM a, LATERAL (SELECT * FROM b WHERE b.a = a.id) x, (c NATURAL JOIN d)", kind: Read, reads: l("a", "b", "c", "d")},
		{sql: "SELECT * FROM ONLY a, b *", kind: Read, reads: l("a", "b")},
		{sql: "SELECT * FROM a TABLESAMPLE SYSTEM (10) REPEATABLE (1)", kind: Read, reads: l("a")},
	})
}

func TestMySQLEdgeCases(t *testing.T) {
	checkCases(t, MySQL, []tcase{
		// MariaDB's ANALYZE runs the statement; ANALYZE TABLE is a write of
		// the table's statistics.
		{sql: "ANALYZE UPDATE a SET v = 1 WHERE id = 2", kind: Write, writes: l("a")},
		{sql: "ANALYZE FORMAT=JSON DELETE FROM a WHERE id = 2", kind: Write, writes: l("a")},
		{sql: "ANALYZE FORMAT = JSON INSERT INTO a SELECT * FROM b", kind: Write, writes: l("a"), reads: l("b")},
		{sql: "ANALYZE SELECT * FROM a", kind: Read, reads: l("a")},
		{sql: "ANALYZE TABLE a", kind: Write, writes: l("a")},
		{sql: "SELECT 1 # DELETE FROM t", kind: Read},
		{sql: "SELECT 1 -- DELETE FROM t", kind: Read},
		{sql: "SELECT 1 --1", kind: Read},
		{sql: "SELECT 1 --1; DELETE FROM t", kind: Write, writes: l("t")},
		{sql: "/*!40101 SET NAMES utf8 */", kind: Buffer},
		{sql: "SELECT 1 /*!50100 , GET_LOCK('x', 1) */", kind: Write, locks: true},
		{sql: "SELECT 1 /*! ; DELETE FROM t */", kind: Write, writes: l("t")},
		{sql: "SELECT 1 /*M!100100 ; DELETE FROM t */", kind: Write, writes: l("t")},
		{sql: "SELECT 1 /* ; DELETE FROM t */", kind: Read},
		{sql: `SELECT 'a\'; DELETE FROM t; -- '`, kind: Read},
		{sql: `SELECT "x"" ; DELETE FROM t"`, kind: Read},
		{sql: "SELECT * FROM `My``Tab` JOIN Db.Other o ON o.id = 1", kind: Read, reads: l("db.other", "my`tab")},
		{sql: "SELECT * FROM `unterminated", kind: Write, unknown: true, reason: "unparseable"},
		{sql: "SELECT @x := id FROM t", kind: Buffer, reads: l("t")},
		{sql: "SELECT @x := id FROM t FOR UPDATE", kind: Write, reads: l("t"), locks: true},
		{sql: "SELECT id INTO @x FROM t", kind: Buffer, reads: l("t")},
		{sql: "SELECT * FROM t INTO OUTFILE '/tmp/x'", kind: Write, reads: l("t")},
		{sql: "SELECT * FROM t LOCK IN SHARE MODE", kind: Write, reads: l("t"), locks: true},
		{sql: "SELECT * FROM a WHERE id IN (SELECT id FROM b FOR UPDATE)", kind: Write, reads: l("a", "b"), locks: true},
		{sql: "SET SESSION sql_mode = ''", kind: Buffer},
		{sql: "SET GLOBAL max_connections = 10", kind: Write},
		{sql: "SET PERSIST max_connections = 10", kind: Write},
		{sql: "SET @@persist.max_connections = 10", kind: Write},
		{sql: "SET @x = (SELECT GET_LOCK('a', 1))", kind: Write, locks: true},
		{sql: "SET TRANSACTION ISOLATION LEVEL READ COMMITTED", kind: Buffer},
		{sql: "SELECT LAST_INSERT_ID(), LAST_INSERT_ID(5)", kind: Buffer},
		{sql: "SELECT last_insert_id()", kind: Read},
		{sql: "SELECT GET_LOCK('a', 1)", kind: Write, locks: true},
		{sql: "LOCK TABLES a READ, b WRITE", kind: Write, reads: l("a", "b"), locks: true},
		{sql: "UNLOCK TABLES", kind: Write, locks: true},
		{sql: "WITH x AS (SELECT * FROM a) SELECT * FROM x", kind: Read, reads: l("a")},
		{sql: "WITH x AS (SELECT * FROM a) UPDATE b JOIN x ON x.id = b.id SET b.v = 1", kind: Write, reads: l("a", "b"), writes: l("b")},
		{sql: "UPDATE a JOIN b ON a.id = b.id SET a.x = b.x", kind: Write, reads: l("a", "b"), writes: l("a")},
		{sql: "UPDATE a t1 JOIN b t2 ON t1.id = t2.id SET t2.x = 1", kind: Write, reads: l("a", "b"), writes: l("b")},
		{sql: "DELETE t1 FROM a t1 JOIN b ON b.id = t1.id", kind: Write, reads: l("a", "b"), writes: l("a")},
		{sql: "INSERT INTO a (x) SELECT x FROM b ON DUPLICATE KEY UPDATE x = VALUES(x)", kind: Write, reads: l("b"), writes: l("a")},
		{sql: "REPLACE INTO a VALUES (1)", kind: Write, writes: l("a")},
		// MariaDB: the rows of t change places with the partition's; t's
		// history rows go (TiDB's parser and the token analyzer alike).
		{sql: "ALTER TABLE p EXCHANGE PARTITION p0 WITH TABLE t", kind: Write, writes: l("p", "t")},
		{sql: "DELETE HISTORY FROM t", kind: Write, reads: l("t"), writes: l("t")},
		{sql: "DELETE HISTORY FROM t BEFORE SYSTEM_TIME '2026-01-01'", kind: Write, writes: l("t")},
		{sql: "ALTER TABLE p CONVERT PARTITION p0 TO TABLE t", kind: Write, writes: l("p", "t")},
		{sql: "ALTER TABLE p CONVERT TABLE t TO PARTITION p1 VALUES LESS THAN (200)", kind: Write, writes: l("p", "t")},
		{sql: "ALTER TABLE t ADD COLUMN c INT", kind: Write, writes: l("t")},
		{sql: "SELECT my_udf(1)", kind: Write, unknown: true, reason: "unknown function my_udf"},
		{sql: "SELECT CONCAT(a, 'x'), IFNULL(b, 0), DATE_FORMAT(NOW(), '%Y'), JSON_EXTRACT(j, '$.a'), COUNT(*) FROM t GROUP BY a", kind: Read, reads: l("t")},
		{sql: "CREATE TEMPORARY TABLE tmp (id int); INSERT INTO tmp SELECT id FROM a; DROP TABLE tmp", kind: Buffer, reads: l("a")},
		{sql: "CREATE TEMPORARY TABLE tmp SELECT * FROM a", kind: Buffer, reads: l("a")},
		{sql: "CREATE TABLE t (id int)", kind: Write, writes: l("t")},
		{sql: "EXPLAIN DELETE FROM t", kind: Read},
		{sql: "EXPLAIN ANALYZE SELECT * FROM t", kind: Read, reads: l("t")},
		{sql: "PREPARE s FROM 'DELETE FROM t'", kind: Buffer},
		{sql: "EXECUTE s", kind: Write, unknown: true},
		{sql: "CALL p()", kind: Write, unknown: true},
		{sql: "DO SLEEP(1)", kind: Read},
		{sql: "DO GET_LOCK('x', 1)", kind: Write, locks: true},
		{sql: "START TRANSACTION", kind: Buffer},
		{sql: "COMMIT", kind: Write, reason: ReasonTxnEnd},
		{sql: "USE db", kind: Buffer},
		{sql: "SHOW TABLES", kind: Read},
		{sql: "SELECT seq.nextval", kind: Write, unknown: true},
		{sql: "TRUNCATE TABLE a", kind: Write, writes: l("a")},
		{sql: "HANDLER t OPEN", kind: Write, unknown: true},
	})
}

func TestKindOrderAndStrings(t *testing.T) {
	if !(Read < Buffer && Buffer < Write) {
		t.Fatal("kinds are not ordered by severity")
	}
	for _, k := range []Kind{Read, Buffer, Write} {
		p, err := ParseKind(k.String())
		if err != nil || p != k {
			t.Errorf("ParseKind(%q) = %v, %v", k.String(), p, err)
		}
	}
	if _, err := ParseKind("x"); err == nil || !strings.HasPrefix(err.Error(), "classify: ") {
		t.Errorf("ParseKind error %v", err)
	}
	if _, err := ParseDialect("oracle"); err == nil || !strings.HasPrefix(err.Error(), "classify: ") {
		t.Errorf("ParseDialect error %v", err)
	}
	if d, _ := ParseDialect("MariaDB"); d != MySQL {
		t.Errorf("ParseDialect(MariaDB) = %v", d)
	}
}

func TestCacheAndAddReadOnlyFunctions(t *testing.T) {
	c := New(Config{Dialect: Postgres})
	q := "SELECT f(1) FROM t"
	if r := c.Classify(q); r.Kind != Write || !r.UnknownTables {
		t.Fatalf("before: %+v", r)
	}
	if n := c.cache.len(); n != 1 {
		t.Fatalf("cache has %d entries, want 1", n)
	}
	c.AddReadOnlyFunctions("F")
	if n := c.cache.len(); n != 0 {
		t.Fatalf("cache not purged: %d entries", n)
	}
	if r := c.Classify(q); r.Kind != Read || !slices.Equal(r.Reads, []string{"t"}) {
		t.Fatalf("after: %+v", r)
	}
}

func TestCacheEviction(t *testing.T) {
	c := New(Config{Dialect: MySQL, CacheSize: 16})
	for i := 0; i < 100; i++ {
		c.Classify("SELECT " + strings.Repeat("1+", i) + "1")
	}
	if n := c.cache.len(); n > 16 {
		t.Fatalf("cache holds %d entries, cap 16", n)
	}
	if New(Config{CacheSize: -1}).cache != nil {
		t.Fatal("negative CacheSize must disable the cache")
	}
}

func TestConcurrentClassify(t *testing.T) {
	for _, d := range []Dialect{Postgres, MySQL} {
		c := New(Config{Dialect: d, CacheSize: 8})
		qs := []string{"SELECT * FROM a", "UPDATE a SET x = 1", "SET @x = 1", "SELECT f()", "BEGIN",
			"SELECT * FROM b JOIN c ON c.id = b.id", "DELETE FROM z", "SELECT 1", "SELECT 2", "SELECT 3"}
		want := make([]Result, len(qs))
		for i, q := range qs {
			want[i] = New(Config{Dialect: d, CacheSize: -1}).Classify(q)
		}
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 500; i++ {
					k := (i + g) % len(qs)
					if g == 0 && i%100 == 0 {
						c.AddReadOnlyFunctions("unrelated")
					}
					got := c.Classify(qs[k])
					if got.Kind != want[k].Kind || !slices.Equal(got.Reads, want[k].Reads) {
						t.Errorf("%v %q: got %+v want %+v", d, qs[k], got, want[k])
						return
					}
				}
			}(g)
		}
		wg.Wait()
	}
}
