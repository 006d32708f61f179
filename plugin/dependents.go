package plugin

import (
	"context"
	"time"

	"github.com/freshread/freshread/lsnstore"
)

// depGraph is the dependency graph in use: table -> the tables a write to
// it also writes (closed transitively), from Config.Dependents merged with
// the graph the tracker publishes in the store. lsnstore.Everything ("*")
// among the dependents means "any table": the unknown-tables position is
// raised too.
type depGraph struct {
	graph   map[string][]string
	version string // the store graph's version merged in
}

// dependentsRefresh is how often the poller checks the store graph's
// version.
const dependentsRefresh = time.Second

// refreshDependents rereads the store's graph when its version changed.
// A store without a graph (or an error) keeps the current one.
func (p *Plugin) refreshDependents(ctx context.Context) {
	ds, ok := p.cfg.Store.(lsnstore.DependentsStore)
	if !ok {
		return
	}
	cur := p.deps.Load()
	v, err := ds.DependentsVersion(ctx)
	if err != nil || (cur != nil && v == cur.version) {
		return
	}
	d, err := ds.Dependents(ctx)
	if err != nil {
		return
	}
	p.setDependents(d.Graph, d.Version)
}

// setDependents merges published with Config.Dependents and installs it.
func (p *Plugin) setDependents(published map[string][]string, version string) {
	union := make(map[string][]string, len(p.cfg.Dependents)+len(published))
	for t, ds := range p.cfg.Dependents {
		union[t] = append(union[t], ds...)
	}
	for t, ds := range published {
		union[t] = append(union[t], ds...)
	}
	p.deps.Store(&depGraph{graph: closeDependents(union), version: version})
}

// dependentsOf returns the graph's dependents of t.
func (p *Plugin) dependentsOf(t string) []string {
	if g := p.deps.Load(); g != nil {
		return g.graph[t]
	}
	return nil
}
