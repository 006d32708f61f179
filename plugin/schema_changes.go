package plugin

import (
	"context"
	"strings"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// Schema changes made by other processes (docs/design/unnamed-rows.md,
// "When the graph is learned"). Each graph this process learns from the
// catalog carries the store's schema generation read just before the
// catalog (depGraph.gen). Every raise sends it to the store, which
// compares it, in the raise's own script, with the current generation
// (lsnstore.SchemaChanges): when the generation moved since, or a change
// is under way, the store raises the unknown-tables position too, which
// every read waits for, and says so; the poller then relearns the graph
// (schemaStale). A schema change run through this plugin records a mark
// in the store before it runs, and its commit's raise advances the
// generation and ends the mark: no write that commits after it can be
// raised without the check seeing one or the other.

// unreadGeneration is the generation of a graph learned when the store's
// could not be read: it equals none, so every checked raise finds the
// graph stale until it is relearned.
const unreadGeneration = "\x00unread"

// staleRelearnSpacing is the least time between two relearnings the
// store's check asked for.
const staleRelearnSpacing = time.Second

// staleDue reports whether the poller should relearn the graph now
// because a raise found that it may predate a schema change: none of
// those relearnings runs, and the last began staleRelearnSpacing ago.
func (p *Plugin) staleDue(now time.Time) bool {
	return p.schemaStale.Load() && !p.relearning.Load() && now.UnixNano()-p.staleAt.Load() >= int64(staleRelearnSpacing)
}

// schemaChange returns, for a statement about to run, the part of its
// write set that says it is a schema change that can add a dependency
// (addsDependency): schema set, and the store's mark, recorded now,
// before the statement runs. Empty for any other statement.
func (p *Plugin) schemaChange(ctx context.Context, sql string) writeSet {
	if !addsDependency(sql) {
		return writeSet{}
	}
	// A schema statement alone (one statement, autocommit) writes no row
	// through the edges it adds: its own raise is checked against the
	// generation before it (lsnstore.SchemaCheck.Before). Anything else
	// counts the change against the graph (schemaAfter).
	w := writeSet{schema: true, schemaAfter: !singleStatement(sql)}
	sc, ok := p.cfg.Store.(lsnstore.SchemaChanges)
	if !ok {
		return w
	}
	ctx, cancel := p.publishContext(ctx)
	defer cancel()
	mark, err := sc.BeginSchemaChange(ctx)
	if err != nil {
		p.cfg.Logger.WarnContext(ctx, "freshread: cannot record in the store that a schema change is under way: until its commit is published, another process's write through a trigger, cascade or view it adds may raise only the tables that process's old graph names (it relearns the graph when the commit is published, or within 30 seconds): check that Redis is up and reachable from this process", "err", err)
		return w
	}
	w.marks = []string{mark}
	return w
}

// endSchemaMarks ends the marks of schema changes that did not commit (a
// rollback). Best effort: a mark left lapses after lsnstore.SchemaTTL,
// and until then only makes writes raise the unknown-tables position.
func (p *Plugin) endSchemaMarks(ctx context.Context, marks []string) {
	sc, ok := p.cfg.Store.(lsnstore.SchemaChanges)
	if !ok || len(marks) == 0 {
		return
	}
	ctx, cancel := p.publishContext(ctx)
	defer cancel()
	if err := sc.EndSchemaChanges(ctx, marks); err != nil {
		p.cfg.Logger.DebugContext(ctx, "freshread: cannot end the mark of a schema change that did not commit; it lapses by itself", "err", err)
	}
}

// raiseChecked raises tables (nil: unknown) at pos with the store's
// schema check, for w, a write set raised with graph g (nil: none yet).
// When the store finds that g may predate a schema change it raised the
// unknown-tables position as well; the poller relearns the graph.
func (p *Plugin) raiseChecked(ctx context.Context, sc lsnstore.SchemaChanges, tables []string, w writeSet, g *depGraph, pos lsnstore.Position) error {
	c := lsnstore.SchemaCheck{Changed: w.schema, Before: w.schema && !w.schemaAfter, Done: w.marks}
	if g != nil && g.checked {
		c.Graph, c.Check = g.gen, true
	}
	v, err := sc.RaiseChecked(ctx, tables, pos, c)
	if err != nil {
		return err
	}
	if v.Stale {
		p.schemaStale.Store(true)
	}
	return nil
}

// schemaGeneration reads the store's schema generation, before a catalog
// read; unreadGeneration when it cannot be read, and "" when the store
// does not check schema changes.
func (p *Plugin) schemaGeneration(ctx context.Context) string {
	sc, ok := p.cfg.Store.(lsnstore.SchemaChanges)
	if !ok {
		return ""
	}
	ctx, cancel := p.publishContext(ctx)
	defer cancel()
	g, err := sc.SchemaGeneration(ctx)
	if err != nil {
		return unreadGeneration
	}
	return g
}

// singleStatement reports whether sql holds one statement: no semicolon
// but trailing ones (a body with semicolons, such as a MariaDB trigger's
// BEGIN ... END, counts as several: the conservative answer).
func singleStatement(sql string) bool {
	return !strings.Contains(strings.TrimRight(sql, "; \t\r\n"), ";")
}
