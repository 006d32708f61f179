package plugin

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/freshread/freshread/depgraph"
)

func TestAddsDependency(t *testing.T) {
	for sql, want := range map[string]bool{
		"CREATE TRIGGER t AFTER UPDATE ON items FOR EACH ROW SET @x = 1":           true,
		"  create view v as select 1":                                              true,
		"/* migration 7 */ ALTER TABLE items ADD FOREIGN KEY (u) REFERENCES users": true,
		"-- rename it\nALTER TABLE a RENAME TO b":                                  true,
		"# a comment\nRENAME TABLE a TO b":                                         true,
		"(create or replace function f() returns trigger as $$ begin end $$)":      true,
		"CREATE TABLE plain (id int)":                                              false,
		"CREATE TABLE ev_eu PARTITION OF ev FOR VALUES IN ('eu')":                  true,
		"CREATE TABLE sub () INHERITS (base)":                                      true,
		"ALTER TABLE ev DETACH PARTITION ev_eu":                                    true,
		"ALTER TABLE g ADD COLUMN k int GENERATED ALWAYS AS (a * 2) STORED":        true,
		"CREATE TABLE g (a INT NOT NULL, k INT AS (a * 10) PERSISTENT)":            true,
		"ALTER TABLE g ADD k INT AS (a * 2) VIRTUAL":                               true,
		"alter table g add k int as (a * 2) stored":                                true,
		"DROP VIEW v":                            false,
		"INSERT INTO created VALUES ('trigger')": false,
		"UPDATE items SET name = 'create view'":  false,
		"SELECT 1":                               false,
		"creates view":                           false,
		"":                                       false,
		"/* unterminated":                        false,
		"-- only a comment":                      false,
	} {
		if got := addsDependency(sql); got != want {
			t.Errorf("addsDependency(%q) = %v; want %v", sql, got, want)
		}
	}
}

// TestSelfDependentTables: a table the catalog finds self-dependent, and
// one whose Config.KeyColumns column changes unnamed, list themselves among
// their dependents (so every write raises their unkeyed position); each
// is logged once, however often the graph is installed.
func TestSelfDependentTables(t *testing.T) {
	var logs bytes.Buffer
	p := &Plugin{cfg: Config{
		KeyColumns: map[string][]string{"parts": {"item_id"}, "orders": {"user_id"}},
		Logger:     slog.New(slog.NewTextHandler(&logs, nil)),
	}}
	p.depSrc.learned = map[string][]string{"cat": {"cat"}, "a": {"b"}}
	p.depSrc.selfReasons = map[string][]string{"cat": {"a foreign key of cat cascades to cat"}}
	p.depSrc.keyMoves = map[string][]string{"parts": {"item_id"}, "orders": {"note"}}
	p.installDependents()
	p.installDependents()
	for table, self := range map[string]bool{"cat": true, "parts": true, "orders": false, "a": false} {
		if got := slices.Contains(p.dependentsOf(table), table); got != self {
			t.Errorf("%s among its own dependents: %v, want %v (%v)", table, got, self, p.dependentsOf(table))
		}
	}
	for _, table := range []string{"table=cat", "table=parts"} {
		if n := strings.Count(logs.String(), table+" "); n != 1 {
			t.Errorf("%s logged %d times, want once:\n%s", table, n, logs.String())
		}
	}
	if strings.Contains(logs.String(), "orders") {
		t.Errorf("orders logged, but its key column does not move:\n%s", logs.String())
	}
}

// TestSelfDependentModelKey: a column the plugin keys a table by because a
// model declares it the primary key (the catalog holds no key on it) is
// checked against the columns that change unnamed like Config.KeyColumns,
// whether the model is seen before the graph is installed or after (then
// the graph is installed again at once); so is the catalog's key. A model
// key that does not move, and a table whose moving column keys nothing,
// stay keyed.
func TestSelfDependentModelKey(t *testing.T) {
	var logs bytes.Buffer
	p := &Plugin{cfg: Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}}
	p.depSrc.keyMoves = map[string][]string{
		"early": {"id"}, "late": {"id"}, "anycol": {"*"}, "still": {"note"},
		"catkey": {"code"}, "nomodel": {"id"},
	}
	catalog := map[string]*keyDef{"catkey": intKey("code")}
	p.catalog.keys.Store(&catalog)
	for _, table := range []string{"early", "anycol", "still"} {
		p.learnKey(table, "id")
	}
	p.installDependents()
	p.learnKey("late", "id") // seen after the graph was installed
	for table, self := range map[string]bool{
		"early": true, "late": true, "anycol": true, "catkey": true,
		"still": false, "nomodel": false,
	} {
		if got := slices.Contains(p.dependentsOf(table), table); got != self {
			t.Errorf("%s among its own dependents: %v, want %v (%v)", table, got, self, p.dependentsOf(table))
		}
	}
	for _, want := range []string{"table=late", "model's primary key names id", "catalog's primary key names code"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

// TestOlderLearningNeverReplacesANewerGraph: a learning whose catalog read
// began first but ended last (a slow catalog, or the poller's relearning
// racing the one after a schema change) installs nothing; the graph stays
// the one the later learning read.
func TestOlderLearningNeverReplacesANewerGraph(t *testing.T) {
	p := &Plugin{cfg: Config{Logger: slog.New(slog.DiscardHandler)}}
	release, older := make(chan struct{}), make(chan struct{})
	calls := 0
	p.depSrc.learn = func(context.Context, *sql.DB) (*depgraph.Graph, error) {
		calls++
		if calls == 1 {
			close(older)
			<-release
			return &depgraph.Graph{Edges: map[string][]string{"items": {"old_audit"}}}, nil
		}
		return &depgraph.Graph{Edges: map[string][]string{"items": {"audit"}}}, nil
	}
	done := make(chan struct{})
	go func() { defer close(done); p.learnNow(context.Background()) }()
	<-older
	p.learnNow(context.Background())
	close(release)
	<-done
	if got := p.dependentsOf("items"); !slices.Equal(got, []string{"audit"}) {
		t.Fatalf("dependents of items after an older learning ended last: %v, want [audit]", got)
	}
}

// TestFailedLearningRetriedSoon: a learning that fails makes every write
// raise every table, and the next one is due a second later (then 2, 4,
// ... up to dependentsLearnInterval), not a whole interval later; once
// one succeeds, the graph is known again and the interval is back.
func TestFailedLearningRetriedSoon(t *testing.T) {
	p := &Plugin{cfg: Config{Logger: slog.New(slog.DiscardHandler)}}
	fail := true
	p.depSrc.learn = func(context.Context, *sql.DB) (*depgraph.Graph, error) {
		if fail {
			return nil, errors.New("Error on delete of a temporary table")
		}
		return &depgraph.Graph{Edges: map[string][]string{"items": {"audit"}}}, nil
	}
	for n, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		before := time.Now()
		p.learnNow(context.Background())
		if g := p.deps.Load(); g == nil || !g.unknown {
			t.Fatalf("after failed learning %d: the graph is not unknown", n+1)
		}
		p.depMu.Lock()
		next := p.depSrc.learnedAt.Add(dependentsLearnInterval)
		p.depMu.Unlock()
		if d := next.Sub(before); d < want || d > want+time.Second {
			t.Fatalf("after failed learning %d the next is due in %v, want %v", n+1, d, want)
		}
	}
	if got := learnRetry(10); got != dependentsLearnInterval {
		t.Fatalf("learnRetry(10) = %v, want dependentsLearnInterval", got)
	}
	fail = false
	p.learnNow(context.Background())
	if g := p.deps.Load(); g == nil || g.unknown || !slices.Equal(p.dependentsOf("items"), []string{"audit"}) {
		t.Fatalf("after a learning that succeeded: %+v", g)
	}
	p.depMu.Lock()
	failures := p.depSrc.failures
	p.depMu.Unlock()
	if failures != 0 {
		t.Fatalf("failures after a success: %d, want 0", failures)
	}
}
