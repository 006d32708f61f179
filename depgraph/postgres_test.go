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

// analyzeSchema runs schema in a fresh database and returns its graph.
func analyzeSchema(t *testing.T, schema string) *Graph {
	t.Helper()
	pg := testcluster.PostgresFor(t)
	conn := pgConn(t, pg.PrimaryDSN(pg.CreateDatabase(t)))
	ctx := context.Background()
	if _, err := conn.Exec(ctx, schema); err != nil {
		t.Fatal(err)
	}
	g, err := AnalyzePostgres(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestAnalyzePostgres(t *testing.T) {
	g := analyzeSchema(t, depsSchema)
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
	checkClosed(t, got, want)
	if r := strings.Join(g.Reasons["dyn"], "; "); !strings.Contains(r, "EXECUTE") || !strings.Contains(r, "dyn_trg") {
		t.Errorf("reasons for dyn = %q; want the trigger and EXECUTE named", r)
	}
}

// selfSchema has partitions (two levels), an inheritance child, and each
// way a table can write rows of itself that a statement does not name.
const selfSchema = `
CREATE TABLE ev (id int, region text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE ev_eu PARTITION OF ev FOR VALUES IN ('eu');
CREATE TABLE ev_us PARTITION OF ev FOR VALUES IN ('us') PARTITION BY RANGE (id);
CREATE TABLE ev_us_1 PARTITION OF ev_us FOR VALUES FROM (0) TO (1000);

CREATE TABLE base (id int PRIMARY KEY, v text);
CREATE TABLE sub () INHERITS (base);

CREATE TABLE cat (id int PRIMARY KEY, parent_id int REFERENCES cat (id) ON DELETE CASCADE);

CREATE TABLE tree (id int PRIMARY KEY, n int);
CREATE FUNCTION tree_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE tree SET n = n + 1 WHERE id = NEW.id + 1;
  RETURN NULL;
END $$;
CREATE TRIGGER tree_bump AFTER UPDATE ON tree FOR EACH ROW WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION tree_bump();

CREATE TABLE rs (id int PRIMARY KEY, v int);
CREATE RULE rs_r AS ON INSERT TO rs DO ALSO UPDATE rs SET v = 0 WHERE id <> NEW.id;

CREATE TABLE x (id int PRIMARY KEY);
CREATE TABLE y (id int PRIMARY KEY);
CREATE FUNCTION x_to_y() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO y VALUES (NEW.id); RETURN NULL; END $$;
CREATE FUNCTION y_to_x() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN DELETE FROM x WHERE id = NEW.id + 1; RETURN NULL; END $$;
CREATE TRIGGER x_to_y AFTER INSERT ON x FOR EACH ROW EXECUTE FUNCTION x_to_y();
CREATE TRIGGER y_to_x AFTER INSERT ON y FOR EACH ROW EXECUTE FUNCTION y_to_x();

CREATE TABLE keymove (id int PRIMARY KEY, v int);
CREATE FUNCTION keymove_shift() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.v > 10 THEN NEW.id := NEW.id + 100; END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER keymove_shift BEFORE INSERT OR UPDATE ON keymove FOR EACH ROW EXECUTE FUNCTION keymove_shift();

CREATE TABLE keyinto (id int PRIMARY KEY, v int);
CREATE FUNCTION keyinto_pick() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE other int;
BEGIN
  SELECT 1, 2 INTO other, NEW.id;
  RETURN NEW;
END $$;
CREATE TRIGGER keyinto_pick BEFORE INSERT ON keyinto FOR EACH ROW EXECUTE FUNCTION keyinto_pick();

CREATE TABLE stamp (id int PRIMARY KEY, v int, note text);
CREATE FUNCTION stamp_v() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.v := 1;
  INSERT INTO stamp_log VALUES (NEW.v, NEW.id);
  RETURN NEW;
END $$;
CREATE TABLE stamp_log (v int, id int);
CREATE TRIGGER stamp_v BEFORE UPDATE ON stamp FOR EACH ROW EXECUTE FUNCTION stamp_v();

CREATE TABLE gen (a int NOT NULL, k int GENERATED ALWAYS AS (a * 10) STORED, UNIQUE (k));
CREATE TABLE gen_plain (id int PRIMARY KEY, a int, d int GENERATED ALWAYS AS (a * 2) STORED);
`

// TestAnalyzePostgresSelfAndAliases: partitions and inheritance children
// are linked both ways without making either self-dependent; a table whose
// writes reach other rows of itself (a trigger, a rule, a self-referencing
// cascade, a cycle of triggers) or move a key (a BEFORE trigger assigning
// the key, a generated unique column) lists itself; one whose BEFORE
// trigger assigns another column, or whose generated column is no key,
// does not.
func TestAnalyzePostgresSelfAndAliases(t *testing.T) {
	g := analyzeSchema(t, selfSchema)
	got := g.Closed()
	want := map[string][]string{
		"ev":      {"ev_eu", "ev_us", "ev_us_1"},
		"ev_eu":   {"ev", "ev_us", "ev_us_1"},
		"ev_us":   {"ev", "ev_eu", "ev_us_1"},
		"ev_us_1": {"ev", "ev_eu", "ev_us"},
		"base":    {"sub"},
		"sub":     {"base"},
		"cat":     {"cat"},
		"tree":    {"tree"},
		"rs":      {"rs"},
		"x":       {"x", "y"},
		"y":       {"x", "y"},
		"keymove": {"keymove"},
		"keyinto": {"keyinto"},
		"stamp":   {"stamp_log"},
		"gen":     {"gen"},
	}
	checkClosed(t, got, want)
	for _, tb := range []string{"cat", "tree", "rs", "x", "keymove", "gen"} {
		if len(g.SelfReasons[tb]) == 0 {
			t.Errorf("no reason given for %s's self-dependency", tb)
		}
	}
	if m := g.KeyMoves["stamp"]; !reflect.DeepEqual(m, []string{"v"}) {
		t.Errorf("KeyMoves[stamp] = %v, want [v]", m)
	}
	if m := g.KeyMoves["gen_plain"]; !reflect.DeepEqual(m, []string{"d"}) {
		t.Errorf("KeyMoves[gen_plain] = %v, want [d]", m)
	}
}

// checkClosed reports each table whose closed dependents differ from want.
func checkClosed(t *testing.T, got, want map[string][]string) {
	t.Helper()
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
