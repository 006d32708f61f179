package integration_test

import (
	"slices"
	"testing"

	"gorm.io/gorm"

	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/tracker"
)

const trackerDepsSchema = `
CREATE TABLE ta (id int PRIMARY KEY, v text);
CREATE TABLE tb (id serial PRIMARY KEY, a_id int, op text);
CREATE TABLE tc (id serial PRIMARY KEY, a_id int, note text);
CREATE FUNCTION ta_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO tb(a_id, op) VALUES (NEW.id, TG_OP);
  RETURN NEW;
END $$;
CREATE TRIGGER ta_audit AFTER INSERT OR UPDATE ON ta FOR EACH ROW EXECUTE FUNCTION ta_audit();
CREATE FUNCTION tb_chain() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM tb_note(NEW.a_id, 'from ' || NEW.op);
  RETURN NULL;
END $$;
CREATE FUNCTION tb_note(a int, n text) RETURNS void LANGUAGE sql AS $$ INSERT INTO tc(a_id, note) VALUES (a, n) $$;
CREATE TRIGGER tb_chain AFTER INSERT ON tb FOR EACH ROW EXECUTE FUNCTION tb_chain();

CREATE TABLE tparent (id int PRIMARY KEY);
CREATE TABLE tchild (id int PRIMARY KEY, parent_id int REFERENCES tparent(id) ON DELETE CASCADE);
INSERT INTO tparent VALUES (1), (2);
INSERT INTO tchild VALUES (10, 1), (20, 2);

CREATE TABLE tdyn (id int PRIMARY KEY);
CREATE TABLE tsomewhere (id int);
CREATE FUNCTION tdyn_trg() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('INSERT INTO %I VALUES ($1)', TG_ARGV[0]) USING NEW.id;
  RETURN NEW;
END $$;
CREATE TRIGGER tdyn_trg AFTER INSERT ON tdyn FOR EACH ROW EXECUTE FUNCTION tdyn_trg('tsomewhere');

CREATE VIEW ta_counts AS SELECT ta.id, count(tb.id)::text AS n FROM ta LEFT JOIN tb ON tb.a_id = ta.id GROUP BY ta.id;
`

// depsEnv creates the schema, runs a tracker (no direct-write tracking:
// only the graph can make these reads fresh), waits for the graph and
// opens a second plugin on the tracker's store, which reads the graph from
// there by itself. e.db is a plugin on another store: the control.
func depsEnv(t *testing.T) (e *env, withDeps *gorm.DB, graph lsnstore.Dependents) {
	store, _ := newRedisStore(t, "deps-"+t.Name())
	e = newEnv(t)
	e.exec(trackerDepsSchema)
	startTracker(e, "deps-"+t.Name(), tracker.ModeNone)
	graph = waitGraph(t, store, "ta", "tb", "tparent", "tdyn")
	db, _ := e.open(withStore(store))
	e.resumeAll()
	return e, db, graph
}

func TestTrackerTriggerAudit(t *testing.T) {
	e, d, graph := depsEnv(t)
	if !slices.Contains(graph.Graph["ta"], "tb") {
		t.Fatalf("graph: ta -> %v; want tb", graph.Graph["ta"])
	}
	e.pauseAll()

	// Control: without the graph, the audit row written by the trigger is
	// read stale from a replica.
	if err := e.db.Exec("INSERT INTO ta VALUES (1, 'x')").Error; err != nil {
		t.Fatal(err)
	}
	ctl := e.readCol(e.db, "tb", "coalesce(max(op), 'none')", "a_id = ?", 1)
	e.mustReplica(ctl, "control read of tb")
	if ctl.Name != "none" {
		t.Fatalf("control: the replica already has the audit row (%+v): replay is not paused", ctl)
	}

	// With the graph: a write to ta makes tb (and the view over both) read
	// from the primary, which has the audit row.
	if err := d.Exec("INSERT INTO ta VALUES (2, 'y')").Error; err != nil {
		t.Fatal(err)
	}
	got := e.readCol(d, "tb", "coalesce(max(op), 'none')", "a_id = ?", 2)
	e.mustPrimary(got, "read of tb after a write to ta")
	if got.Name != "INSERT" {
		t.Fatalf("audit row: %+v; want op INSERT", got)
	}
	v := e.readCol(d, "ta_counts", "coalesce(max(n), 'none')", "id = ?", 2)
	e.mustPrimary(v, "read of the view ta_counts after a write to ta")
	if v.Name != "1" {
		t.Fatalf("view ta_counts: %+v; want n=1", v)
	}
	// A table outside the graph of ta still goes to a replica.
	e.mustReplica(e.readCol(d, "tparent", "count(*)::text", ""), "read of tparent")
}

func TestTrackerTriggerChain(t *testing.T) {
	e, d, graph := depsEnv(t)
	if !slices.Contains(graph.Graph["ta"], "tc") || !slices.Contains(graph.Graph["tb"], "tc") {
		t.Fatalf("graph: ta -> %v, tb -> %v; want tc in both", graph.Graph["ta"], graph.Graph["tb"])
	}
	e.pauseAll()
	if err := d.Exec("INSERT INTO ta VALUES (3, 'z')").Error; err != nil {
		t.Fatal(err)
	}
	got := e.readCol(d, "tc", "coalesce(max(note), 'none')", "a_id = ?", 3)
	e.mustPrimary(got, "read of tc after a write to ta")
	if got.Name != "from INSERT" {
		t.Fatalf("tc: %+v; want the row written by ta -> tb -> tc", got)
	}
}

func TestTrackerCascadeDelete(t *testing.T) {
	e, d, graph := depsEnv(t)
	if !slices.Contains(graph.Graph["tparent"], "tchild") {
		t.Fatalf("graph: tparent -> %v; want tchild", graph.Graph["tparent"])
	}
	e.pauseAll()
	// Control first, on parent 1.
	if err := e.db.Exec("DELETE FROM tparent WHERE id = 1").Error; err != nil {
		t.Fatal(err)
	}
	ctl := e.readCol(e.db, "tchild", "count(*)::text", "parent_id = ?", 1)
	e.mustReplica(ctl, "control read of tchild")
	if ctl.Name != "1" {
		t.Fatalf("control: %+v; want the stale child still there", ctl)
	}
	if err := d.Exec("DELETE FROM tparent WHERE id = 2").Error; err != nil {
		t.Fatal(err)
	}
	got := e.readCol(d, "tchild", "count(*)::text", "parent_id = ?", 2)
	e.mustPrimary(got, "read of tchild after deleting its parent")
	if got.Name != "0" {
		t.Fatalf("tchild: %+v; want the cascaded delete seen (0 rows)", got)
	}
}

func TestTrackerDynamicSQLConservative(t *testing.T) {
	e, d, graph := depsEnv(t)
	if !slices.Equal(graph.Graph["tdyn"], []string{lsnstore.Everything}) {
		t.Fatalf("graph: tdyn -> %v; want [%s]", graph.Graph["tdyn"], lsnstore.Everything)
	}
	e.pauseAll()
	if err := d.Exec("INSERT INTO tdyn VALUES (7)").Error; err != nil {
		t.Fatal(err)
	}
	got := e.readCol(d, "tsomewhere", "count(*)::text", "id = ?", 7)
	e.mustPrimary(got, "read of the dynamically written table")
	if got.Name != "1" {
		t.Fatalf("tsomewhere: %+v; want the row written by dynamic SQL", got)
	}
	// Conservative: any other table too.
	e.mustPrimary(e.readCol(d, "tparent", "count(*)::text", ""), "read of an unrelated table after a write to tdyn")
}
