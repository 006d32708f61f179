package lsnstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Everything is the dependent that stands for every table of the database:
// a write to a table whose dependents include Everything may have written
// any table (a trigger running dynamic SQL, a rule or a function the
// tracker does not understand). A writer that finds it should raise the
// position of writes whose tables are unknown (Raise with nil tables),
// which every read includes.
const Everything = "*"

// Dependents is the dependency graph of one database, as published by the
// tracker (package tracker): Graph maps a table to the tables that a write
// to it also writes (triggers, cascading foreign keys, rules, and the views
// over it). Published graphs are closed transitively: Graph[t] already
// holds every table reachable from t. Lists are sorted and hold no
// duplicates; Everything may appear in them.
type Dependents struct {
	// Graph maps a table to every table writing it also writes
	// (transitively), as store table keys.
	Graph map[string][]string
	// Version identifies the content of Graph (a hash): equal versions,
	// equal graphs. Empty when nothing was published.
	Version string
	// Published is when the graph was last published (or confirmed
	// unchanged); zero when nothing was published.
	Published time.Time
}

// Expand returns the tables a write to tables also writes (without tables
// themselves) and reports whether any of them depends on Everything.
func (d Dependents) Expand(tables []string) (deps []string, everything bool) {
	seen := make(map[string]bool, len(tables))
	for _, t := range tables {
		seen[t] = true
	}
	for _, t := range tables {
		for _, x := range d.Graph[t] {
			if x == Everything {
				everything = true
				continue
			}
			if !seen[x] {
				seen[x] = true
				deps = append(deps, x)
			}
		}
	}
	return deps, everything
}

// DependentsStore is implemented by Memory and Redis: it holds the
// dependency graph of one database.
type DependentsStore interface {
	// PublishDependents replaces the graph. graph should be closed
	// transitively (the tracker publishes it so); it is normalized (lists
	// sorted, duplicates and self-edges dropped, tables without
	// dependents dropped). Publishing an unchanged graph only refreshes
	// its Published time.
	PublishDependents(ctx context.Context, graph map[string][]string) error
	// Dependents returns the graph (an empty Dependents, nil Graph, when
	// nothing was published). The map is the caller's.
	Dependents(ctx context.Context) (Dependents, error)
	// DependentsVersion returns the Version of the graph, cheaply: a
	// reader polls it and calls Dependents when it changes.
	DependentsVersion(ctx context.Context) (string, error)
}

var (
	_ DependentsStore = (*Memory)(nil)
	_ DependentsStore = (*Redis)(nil)
)

// normalizeGraph returns graph with sorted, deduplicated lists, without
// self-edges and empty lists, and its version.
func normalizeGraph(graph map[string][]string) (map[string][]string, string) {
	out := make(map[string][]string, len(graph))
	for t, ds := range graph {
		var l []string
		for _, d := range ds {
			if d != t && d != "" {
				l = append(l, d)
			}
		}
		if len(l) == 0 {
			continue
		}
		slices.Sort(l)
		out[t] = slices.Compact(l)
	}
	h := sha256.New()
	for _, t := range slices.Sorted(maps.Keys(out)) {
		b, _ := json.Marshal(out[t])
		fmt.Fprintf(h, "%q=%s\n", t, b)
	}
	return out, hex.EncodeToString(h.Sum(nil)[:8])
}

func copyGraph(g map[string][]string) map[string][]string {
	if g == nil {
		return nil
	}
	out := make(map[string][]string, len(g))
	for t, l := range g {
		out[t] = slices.Clone(l)
	}
	return out
}

// PublishDependents implements DependentsStore.
func (m *Memory) PublishDependents(_ context.Context, graph map[string][]string) error {
	g, v := normalizeGraph(graph)
	m.deps.Store(&Dependents{Graph: g, Version: v, Published: time.Now()})
	return nil
}

// Dependents implements DependentsStore.
func (m *Memory) Dependents(context.Context) (Dependents, error) {
	d := m.deps.Load()
	if d == nil {
		return Dependents{}, nil
	}
	return Dependents{Graph: copyGraph(d.Graph), Version: d.Version, Published: d.Published}, nil
}

// DependentsVersion implements DependentsStore.
func (m *Memory) DependentsVersion(context.Context) (string, error) {
	if d := m.deps.Load(); d != nil {
		return d.Version, nil
	}
	return "", nil
}

// Redis keys of the graph (see the package documentation):
//
//	P{D}-<table>-dependents      JSON array of the tables a write to <table> also writes
//	P{D}-dependents              hash <table> -> the same JSON array (the whole graph)
//	P{D}-dependents-version      the graph's version
//	P{D}-dependents-published    unix milliseconds of the last publication
//
// The graph keys have no TTL: a graph is not a position, and a reader that
// lost it would stop raising dependents (stale reads). A table that leaves
// the graph has its key deleted at the next publication.
func (r *Redis) dependentsKey(table string) string { return r.base + table + "-dependents" }
func (r *Redis) graphKey() string                  { return r.base + "dependents" }
func (r *Redis) graphVersionKey() string           { return r.base + "dependents-version" }
func (r *Redis) graphPublishedKey() string         { return r.base + "dependents-published" }

// PublishDependents implements DependentsStore: one HKEYS, then one
// MULTI/EXEC transaction that replaces every graph key (all keys share the
// database's hash tag).
func (r *Redis) PublishDependents(ctx context.Context, graph map[string][]string) error {
	if r.err != nil {
		return r.err
	}
	g, v := normalizeGraph(graph)
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	old, err := r.rdb.Get(ctx, r.graphVersionKey()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("lsnstore: redis GET: %w", err)
	}
	if old == v && v != "" {
		if err := r.rdb.Set(ctx, r.graphPublishedKey(), now, 0).Err(); err != nil {
			return fmt.Errorf("lsnstore: redis SET: %w", err)
		}
		return nil
	}
	oldTables, err := r.rdb.HKeys(ctx, r.graphKey()).Result()
	if err != nil {
		return fmt.Errorf("lsnstore: redis HKEYS: %w", err)
	}
	_, err = r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, t := range oldTables {
			if _, keep := g[t]; !keep {
				p.Del(ctx, r.dependentsKey(t))
			}
		}
		p.Del(ctx, r.graphKey())
		if len(g) > 0 {
			fields := make([]any, 0, 2*len(g))
			for t, l := range g {
				b, _ := json.Marshal(l)
				fields = append(fields, t, string(b))
				p.Set(ctx, r.dependentsKey(t), string(b), 0)
			}
			p.HSet(ctx, r.graphKey(), fields...)
		}
		p.Set(ctx, r.graphVersionKey(), v, 0)
		p.Set(ctx, r.graphPublishedKey(), now, 0)
		return nil
	})
	if err != nil {
		return fmt.Errorf("lsnstore: redis publish dependents: %w", err)
	}
	return nil
}

// Dependents implements DependentsStore with one pipelined round trip.
func (r *Redis) Dependents(ctx context.Context) (Dependents, error) {
	if r.err != nil {
		return Dependents{}, r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	var (
		hall *redis.MapStringStringCmd
		meta *redis.SliceCmd
	)
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		hall = p.HGetAll(ctx, r.graphKey())
		meta = p.MGet(ctx, r.graphVersionKey(), r.graphPublishedKey())
		return nil
	})
	if err != nil {
		return Dependents{}, fmt.Errorf("lsnstore: redis read dependents: %w", err)
	}
	var d Dependents
	if vals := meta.Val(); len(vals) == 2 {
		if s, ok := vals[0].(string); ok {
			d.Version = s
		}
		if s, ok := vals[1].(string); ok {
			if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
				d.Published = time.UnixMilli(ms)
			}
		}
	}
	if len(hall.Val()) > 0 {
		d.Graph = make(map[string][]string, len(hall.Val()))
		for t, s := range hall.Val() {
			var l []string
			if err := json.Unmarshal([]byte(s), &l); err != nil {
				return Dependents{}, fmt.Errorf("lsnstore: dependents of %q at key %s: %w", t, r.graphKey(), err)
			}
			d.Graph[t] = l
		}
	}
	return d, nil
}

// DependentsVersion implements DependentsStore with one GET.
func (r *Redis) DependentsVersion(ctx context.Context) (string, error) {
	if r.err != nil {
		return "", r.err
	}
	ctx, call := r.withTimeout(ctx)
	defer call.release()
	v, err := r.rdb.Get(ctx, r.graphVersionKey()).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("lsnstore: redis GET: %w", err)
	}
	return v, nil
}
