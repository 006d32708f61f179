package depgraph

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// bodyStmts returns, per segment, its SQL, calls and dynamic reason.
func bodyStmts(body string) (sqls, callsOut, dynamic []string) {
	for _, seg := range splitSegments(lex(body)) {
		st := analyzeSegment(body, seg)
		if st.sql != "" {
			sqls = append(sqls, st.sql)
		}
		callsOut = append(callsOut, st.calls...)
		if st.dynamic != "" {
			dynamic = append(dynamic, st.dynamic)
		}
	}
	return
}

func TestSplitPlpgsql(t *testing.T) {
	body := `
DECLARE
  n int := helper_count(1);
  c CURSOR FOR SELECT * FROM x;
BEGIN
  -- a comment; with a semicolon
  /* nested /* comment */ ; */
  IF NEW.amount > 0 AND is_big(NEW.amount) THEN
    INSERT INTO audit(a_id, note) VALUES (NEW.id, 'it''s; fine');
  ELSIF TG_OP = 'DELETE' THEN
    DELETE FROM mirror WHERE id = OLD.id;
  ELSE
    UPDATE totals SET n = n + 1 WHERE k = CASE WHEN NEW.id > 0 THEN 1 ELSE 2 END;
  END IF;
  SELECT count(*) INTO STRICT n FROM seen WHERE id = NEW.id;
  PERFORM log_it(NEW.id, $q$ text; with; semicolons $q$);
  FOR r IN SELECT * FROM src LOOP
    INSERT INTO dst VALUES (r.id) RETURNING id INTO n;
  END LOOP;
  <<outer>>
  LOOP
    EXIT outer WHEN n > 3;
    n := n + 1;
  END LOOP outer;
  NEW.updated_at := now();
  RAISE NOTICE 'done %', n;
  MERGE INTO m USING src s ON m.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.v);
  CALL do_more(1);
  RETURN NEW;
EXCEPTION WHEN unique_violation THEN
  INSERT INTO errors VALUES (1);
  RETURN NULL;
END;`
	sqls, calls, dynamic := bodyStmts(body)
	if len(dynamic) != 0 {
		t.Fatalf("dynamic = %q; want none", dynamic)
	}
	want := []string{
		"INSERT INTO audit", "DELETE FROM mirror", "UPDATE totals", "SELECT count ( * ) FROM seen",
		"SELECT log_it", "SELECT * FROM src", "INSERT INTO dst VALUES ( r . id ) RETURNING id",
		"MERGE INTO m", "INSERT INTO errors",
	}
	if len(sqls) != len(want) {
		t.Fatalf("got %d statements %q; want %d", len(sqls), sqls, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(sqls[i], w) {
			t.Errorf("statement %d = %q; want prefix %q", i, sqls[i], w)
		}
		if strings.Contains(sqls[i], " INTO n") || strings.Contains(sqls[i], "STRICT") {
			t.Errorf("statement %d = %q kept the PL/pgSQL INTO target", i, sqls[i])
		}
	}
	for _, c := range []string{"helper_count", "is_big", "log_it", "do_more", "now"} {
		if !slices.Contains(calls, c) {
			t.Errorf("calls %q lack %q", calls, c)
		}
	}
}

func TestSplitDynamic(t *testing.T) {
	for _, body := range []string{
		`BEGIN EXECUTE 'INSERT INTO ' || TG_ARGV[0] || ' VALUES (1)'; RETURN NEW; END`,
		`BEGIN EXECUTE format('DELETE FROM %I', TG_TABLE_NAME); END`,
		`BEGIN FOR r IN EXECUTE 'SELECT 1' LOOP NULL; END LOOP; END`,
		`BEGIN RETURN QUERY EXECUTE 'SELECT 1'; END`,
		`BEGIN OPEN c FOR EXECUTE 'SELECT 1'; END`,
		`BEGIN frobnicate the table; END`,
	} {
		if _, _, dyn := bodyStmts(body); len(dyn) == 0 {
			t.Errorf("%q: not taken as dynamic", body)
		}
	}
}

func TestSplitSQLFunction(t *testing.T) {
	sqls, _, dyn := bodyStmts(`INSERT INTO a VALUES ($1); UPDATE b SET x = $2 WHERE id = $1; SELECT 1`)
	if len(dyn) != 0 || len(sqls) != 3 {
		t.Fatalf("sqls %q dyn %q", sqls, dyn)
	}
	sqls, _, dyn = bodyStmts(`BEGIN ATOMIC INSERT INTO a VALUES (1); INSERT INTO b VALUES (2); END`)
	if len(dyn) != 0 || !reflect.DeepEqual(len(sqls), 2) {
		t.Fatalf("BEGIN ATOMIC: sqls %q dyn %q", sqls, dyn)
	}
}

func TestHarmlessFunctions(t *testing.T) {
	sqls, _, _ := bodyStmts(`BEGIN PERFORM pg_notify('ch', NEW.id::text); END`)
	if len(sqls) != 1 || strings.Contains(sqls[0], "pg_notify") {
		t.Fatalf("sqls = %q; want pg_notify replaced", sqls)
	}
}
