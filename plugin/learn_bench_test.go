package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/freshread/freshread/depgraph"
	"github.com/freshread/freshread/internal/harness/testcluster"
)

// learnSchemaSize is the size of the catalog the learning benchmarks read:
// this many tables, each with a trigger writing an audit table, and half as
// many views.
const learnSchemaSize = 100

// benchLearn creates the schema qs in a new database reached through
// driver and dsn, measures learn over it and returns the last graph.
func benchLearn(b *testing.B, driver, dsn string, qs []string, learn func(context.Context, *sql.DB) (*depgraph.Graph, error)) map[string][]string {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	for _, q := range qs {
		if _, err := db.Exec(q); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	ctx := context.Background()
	var g *depgraph.Graph
	b.ReportAllocs()
	for b.Loop() {
		if g, err = learn(ctx, db); err != nil {
			b.Fatal(err)
		}
	}
	return g.Edges
}

// checkLearnedSchema checks the graph of the benchmarks' schema: every
// table tN raises audit (its trigger) and, for even N, the view vN.
func checkLearnedSchema(b *testing.B, g map[string][]string) {
	b.Helper()
	for i := range learnSchemaSize {
		t := fmt.Sprintf("t%d", i)
		if !slices.Contains(g[t], "audit") {
			b.Fatalf("%s -> %v: the trigger's audit table is missing", t, g[t])
		}
		if v := fmt.Sprintf("v%d", i); i%2 == 0 && !slices.Contains(g[t], v) {
			b.Fatalf("%s -> %v: the view %s is missing", t, g[t], v)
		}
	}
}

// BenchmarkLearnDependentsPostgres: one in-process learning of the graph
// (depgraph.AnalyzePostgres on a pgx connection), as the plugin does at
// start, after a schema change and every 30 s.
//
//	go test -run '^$' -bench LearnDependents -benchmem ./plugin/
func BenchmarkLearnDependentsPostgres(b *testing.B) {
	pg := testcluster.PostgresFor(b)
	qs := []string{"CREATE TABLE audit (id serial PRIMARY KEY, note text)"}
	for i := range learnSchemaSize {
		qs = append(qs,
			fmt.Sprintf("CREATE TABLE t%d (id int PRIMARY KEY, name text)", i),
			fmt.Sprintf(`CREATE FUNCTION t%d_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.name <> OLD.name THEN INSERT INTO audit (note) VALUES ('t%d'); END IF; RETURN NEW; END $$`, i, i),
			fmt.Sprintf("CREATE TRIGGER t%d_audit AFTER UPDATE ON t%d FOR EACH ROW EXECUTE FUNCTION t%d_audit()", i, i, i))
		if i%2 == 0 {
			qs = append(qs, fmt.Sprintf("CREATE VIEW v%d AS SELECT id, name FROM t%d", i, i))
		}
	}
	g := benchLearn(b, "pgx", pg.PrimaryDSN(pg.CreateDatabase(b)), qs, pgDependents)
	checkLearnedSchema(b, g)
}

// BenchmarkLearnDependentsMariaDB: one learning from information_schema.
func BenchmarkLearnDependentsMariaDB(b *testing.B) {
	m := testcluster.MariaDBFor(b)
	qs := []string{"CREATE TABLE audit (id INT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(100))"}
	for i := range learnSchemaSize {
		qs = append(qs,
			fmt.Sprintf("CREATE TABLE t%d (id INT PRIMARY KEY, name VARCHAR(100))", i),
			fmt.Sprintf(`CREATE TRIGGER t%d_audit AFTER UPDATE ON t%d FOR EACH ROW
BEGIN IF NEW.name <> OLD.name THEN INSERT INTO audit (note) VALUES ('t%d'); END IF; END`, i, i, i))
		if i%2 == 0 {
			qs = append(qs, fmt.Sprintf("CREATE VIEW v%d AS SELECT id, name FROM t%d", i, i))
		}
	}
	g := benchLearn(b, "mysql", m.PrimaryDSN(m.CreateDatabase(b)), qs, depgraph.AnalyzeMySQL)
	checkLearnedSchema(b, g)
}
