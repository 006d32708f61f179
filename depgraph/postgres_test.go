package depgraph

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/freshread/freshread/internal/harness/testcluster"
	"github.com/freshread/freshread/lsnstore"
)

// depsSchema has one of each kind of dependency.
const depsSchema = `
CREATE TABLE a (id int PRIMARY KEY, v text);
CREATE TABLE b (id serial PRIMARY KEY, a_id int, op text);
CREATE TABLE c (id serial PRIMARY KEY, b_id int);
CREATE FUNCTION a_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO b(a_id, op) VALUES (NEW.id, TG_OP);
  RETURN NEW;
END $$;
CREATE TRIGGER a_audit AFTER INSERT OR UPDATE ON a FOR EACH ROW EXECUTE FUNCTION a_audit();
CREATE FUNCTION b_chain() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.op IS NOT NULL THEN
    INSERT INTO c(b_id) VALUES (NEW.id);
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER b_chain AFTER INSERT ON b FOR EACH ROW EXECUTE FUNCTION b_chain();

CREATE TABLE parent (id int PRIMARY KEY);
CREATE TABLE child (id int PRIMARY KEY, parent_id int REFERENCES parent(id) ON DELETE CASCADE);
CREATE TABLE plain_child (id int PRIMARY KEY, parent_id int REFERENCES parent(id));

CREATE TABLE dyn (id int PRIMARY KEY);
CREATE FUNCTION dyn_trg() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('INSERT INTO %I VALUES ($1)', TG_ARGV[0]) USING NEW.id;
  RETURN NEW;
END $$;
CREATE TRIGGER dyn_trg AFTER INSERT ON dyn FOR EACH ROW EXECUTE FUNCTION dyn_trg('somewhere');

CREATE TABLE h (n int);
CREATE FUNCTION helper(x int) RETURNS void LANGUAGE sql AS $$ INSERT INTO h VALUES (x) $$;
CREATE TABLE calls_helper (id int);
CREATE FUNCTION calls_helper_trg() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE n int;
BEGIN
  SELECT count(*) INTO n FROM h;
  PERFORM helper(NEW.id);
  RETURN NEW;
END $$;
CREATE TRIGGER calls_helper_trg BEFORE INSERT ON calls_helper FOR EACH ROW EXECUTE FUNCTION calls_helper_trg();

CREATE TABLE r_tab (id int);
CREATE TABLE rlog (id int);
CREATE RULE r_log AS ON INSERT TO r_tab DO ALSO INSERT INTO rlog VALUES (NEW.id);
CREATE TABLE r_odd (id int);
CREATE RULE r_nothing AS ON DELETE TO r_odd DO INSTEAD NOTHING;

CREATE VIEW a_view AS SELECT a.id, a.v, count(b.id) AS n FROM a LEFT JOIN b ON b.a_id = a.id GROUP BY a.id, a.v;
CREATE VIEW a_simple AS SELECT id, v FROM a WHERE id > 0;
CREATE VIEW a_simple2 AS SELECT id FROM a_simple;
`

func pgConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func TestAnalyzePostgres(t *testing.T) {
	pg := testcluster.PostgresFor(t)
	db := pg.CreateDatabase(t)
	conn := pgConn(t, pg.PrimaryDSN(db))
	ctx := context.Background()
	if _, err := conn.Exec(ctx, depsSchema); err != nil {
		t.Fatal(err)
	}
	g, err := AnalyzePostgres(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	got := g.Closed()
	want := map[string][]string{
		"a":            {"a_simple", "a_simple2", "a_view", "b", "c"},
		"b":            {"a_view", "c"},
		"parent":       {"child"},
		"dyn":          {lsnstore.Everything},
		"calls_helper": {"h"},
		"r_tab":        {"rlog"},
		"a_simple":     {"a", "a_simple2", "a_view", "b", "c"},
		"a_simple2":    {"a", "a_simple", "a_view", "b", "c"},
	}
	if !reflect.DeepEqual(got, want) {
		for k, v := range got {
			if !reflect.DeepEqual(v, want[k]) {
				t.Errorf("%s -> %v; want %v", k, v, want[k])
			}
		}
		for k, v := range want {
			if _, ok := got[k]; !ok {
				t.Errorf("%s missing; want %v", k, v)
			}
		}
	}
	if r := strings.Join(g.Reasons["dyn"], "; "); !strings.Contains(r, "EXECUTE") || !strings.Contains(r, "dyn_trg") {
		t.Errorf("reasons for dyn = %q; want the trigger and EXECUTE named", r)
	}
}
